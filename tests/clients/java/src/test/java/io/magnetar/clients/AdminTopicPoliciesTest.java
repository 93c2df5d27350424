package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.Objects;
import java.util.concurrent.Callable;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.junit.jupiter.api.Test;

/**
 * PulsarAdmin's {@code topicPolicies()} (issue 26), the policies AdminConformanceTest does not
 * already apply: message TTL, deduplication, compaction threshold, on a topic and on a
 * partitioned topic's base name; set, read back, removed, bad values refused. Apache Pulsar
 * applies a topic policy a moment after the call, so reads wait within a bound.
 */
class AdminTopicPoliciesTest extends Target {

    static <T> void readsBack(Callable<T> read, T expected) throws InterruptedException {
        AdminConformanceTest.eventually(() -> {
            try {
                return Objects.equals(expected, read.call());
            } catch (Exception e) {
                return false;
            }
        }, "the policy read back as " + expected);
    }

    void setReadRemove(String topic) throws Exception {
        admin.topicPolicies().setMessageTTL(topic, 90);
        readsBack(() -> admin.topicPolicies().getMessageTTL(topic), 90);
        admin.topicPolicies().removeMessageTTL(topic);
        readsBack(() -> admin.topicPolicies().getMessageTTL(topic), null);

        admin.topicPolicies().setDeduplicationStatus(topic, true);
        readsBack(() -> admin.topicPolicies().getDeduplicationStatus(topic), Boolean.TRUE);
        admin.topicPolicies().removeDeduplicationStatus(topic);
        readsBack(() -> admin.topicPolicies().getDeduplicationStatus(topic), null);

        admin.topicPolicies().setCompactionThreshold(topic, 4L << 20);
        readsBack(() -> admin.topicPolicies().getCompactionThreshold(topic), 4L << 20);
        admin.topicPolicies().removeCompactionThreshold(topic);
        readsBack(() -> admin.topicPolicies().getCompactionThreshold(topic), null);
    }

    @Test
    void onATopic() throws Exception {
        String topic = topic("tp");
        admin.topics().createNonPartitionedTopic(topic);
        assertNull(admin.topicPolicies().getMessageTTL(topic));
        setReadRemove(topic);
        assertThrows(PulsarAdminException.PreconditionFailedException.class,
                () -> admin.topicPolicies().setMessageTTL(topic, -5));
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.topicPolicies().setMessageTTL(topic("nosuch"), 10));
    }

    @Test
    void onAPartitionedTopicsBaseName() throws Exception {
        String topic = topic("tp-parted");
        admin.topics().createPartitionedTopic(topic, 2);
        setReadRemove(topic);
        admin.topicPolicies().setMessageTTL(topic, 30);
        readsBack(() -> admin.topicPolicies().getMessageTTL(topic), 30);
        admin.topics().deletePartitionedTopic(topic, true);
    }
}
