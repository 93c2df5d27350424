package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.common.policies.data.PartitionedTopicStats;
import org.apache.pulsar.common.policies.data.PersistentTopicInternalStats;
import org.apache.pulsar.common.policies.data.TopicStats;
import org.junit.jupiter.api.Test;

/**
 * PulsarAdmin's {@code topics()} and {@code lookups()} (issue 26) on a non-partitioned and a
 * partitioned topic: lifecycle and its refusals, stats and internal stats, subscriptions
 * (create, list, peek, skip, reset, clear backlog, delete), last message id, unload, lookup.
 * Every answer asserted; run against each Magnetar target and, with
 * {@code make test-clients-pulsar}, Apache Pulsar 4.0.7.
 */
class AdminTopicsTest extends Target {

    long backlog(String topic, String sub) throws PulsarAdminException {
        return admin.topics().getStats(topic).getSubscriptions().get(sub).getMsgBacklog();
    }

    @Test
    void nonPartitionedTopicAndSubscriptions() throws Exception {
        String topic = topic("plain");
        admin.topics().createNonPartitionedTopic(topic);
        assertThrows(PulsarAdminException.ConflictException.class,
                () -> admin.topics().createNonPartitionedTopic(topic));
        assertThrows(PulsarAdminException.ConflictException.class,
                () -> admin.topics().createPartitionedTopic(topic, 2));
        assertTrue(admin.topics().getList(namespace).contains(topic));
        admin.topics().createSubscription(topic, "s", MessageId.earliest);
        assertThrows(PulsarAdminException.ConflictException.class,
                () -> admin.topics().createSubscription(topic, "s", MessageId.earliest));
        assertEquals(List.of("s"), admin.topics().getSubscriptions(topic));

        List<MessageId> ids = new ArrayList<>();
        try (Producer<byte[]> p = client.newProducer().topic(topic).enableBatching(false).create()) {
            for (int i = 0; i < 5; i++) {
                ids.add(p.newMessage().key("k" + i).value(("m" + i).getBytes()).send());
            }
        }
        TopicStats stats = admin.topics().getStats(topic);
        assertEquals(5, stats.getMsgInCounter());
        assertEquals(5, stats.getSubscriptions().get("s").getMsgBacklog());
        assertTrue(stats.getStorageSize() > 0);
        PersistentTopicInternalStats internal = admin.topics().getInternalStats(topic);
        assertEquals(5, internal.numberOfEntries);
        assertEquals(5, internal.entriesAddedCounter);
        assertTrue(internal.cursors.containsKey("s"));
        assertEquals(ids.get(4), admin.topics().getLastMessageId(topic));

        List<Message<byte[]>> peeked = admin.topics().peekMessages(topic, "s", 2);
        assertEquals(List.of("m0", "m1"), peeked.stream().map(m -> new String(m.getValue())).toList());
        assertEquals("k1", peeked.get(1).getKey());
        admin.topics().skipMessages(topic, "s", 2);
        assertEquals(3, backlog(topic, "s"));
        assertEquals("m2", new String(admin.topics().peekMessages(topic, "s", 1).get(0).getValue()));
        admin.topics().resetCursor(topic, "s", ids.get(1));
        assertEquals(4, backlog(topic, "s"));
        admin.topics().skipAllMessages(topic, "s");
        assertEquals(0, backlog(topic, "s"));
        admin.topics().resetCursor(topic, "s", 0L);
        assertEquals(5, backlog(topic, "s"));
        admin.topics().expireMessagesForAllSubscriptions(topic, 3600);
        assertEquals(5, backlog(topic, "s"));

        admin.topics().unload(topic);
        assertEquals(5, backlog(topic, "s"));  // the cursor survives the unload
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.topics().deleteSubscription(topic, "nosuch"));
        admin.topics().deleteSubscription(topic, "s");
        assertTrue(admin.topics().getSubscriptions(topic).isEmpty());

        admin.topics().delete(topic);
        assertFalse(admin.topics().getList(namespace).contains(topic));
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.topics().getStats(topic));
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.topics().delete(topic));
    }

    @Test
    void partitionedTopicLifecycle() throws Exception {
        String topic = topic("parted");
        admin.topics().createPartitionedTopic(topic, 2);
        assertThrows(PulsarAdminException.ConflictException.class,
                () -> admin.topics().createPartitionedTopic(topic, 2));
        assertEquals(2, admin.topics().getPartitionedTopicMetadata(topic).partitions);
        assertTrue(admin.topics().getPartitionedTopicList(namespace).contains(topic));
        admin.topics().updatePartitionedTopic(topic, 3);
        assertEquals(3, admin.topics().getPartitionedTopicMetadata(topic).partitions);
        assertThrows(PulsarAdminException.class, () -> admin.topics().updatePartitionedTopic(topic, 2));

        admin.topics().createSubscription(topic, "s", MessageId.earliest);
        try (Producer<byte[]> p = client.newProducer().topic(topic).enableBatching(false)
                .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).create()) {
            for (int i = 0; i < 6; i++) {
                p.send(("m" + i).getBytes());
            }
        }
        List<String> listed = admin.topics().getList(namespace);
        for (int i = 0; i < 3; i++) {
            assertTrue(listed.contains(topic + "-partition-" + i), listed.toString());
        }
        PartitionedTopicStats stats = admin.topics().getPartitionedStats(topic, true);
        assertEquals(6, stats.getMsgInCounter());
        assertEquals(3, stats.getPartitions().size());
        assertEquals(6, stats.getSubscriptions().get("s").getMsgBacklog());
        stats.getPartitions().values().forEach(part -> assertEquals(2, part.getMsgInCounter()));
        assertEquals(2, admin.topics().getStats(topic + "-partition-1").getMsgInCounter());

        Map<String, String> lookups = admin.lookups().lookupPartitionedTopic(topic);
        assertEquals(3, lookups.size());
        lookups.values().forEach(url -> assertTrue(url.startsWith(brokerScheme()), url));
        assertTrue(admin.lookups().lookupTopic(topic + "-partition-0").startsWith(brokerScheme()));

        admin.topics().unload(topic);
        assertEquals(6, admin.topics().getPartitionedStats(topic, false).getSubscriptions().get("s").getMsgBacklog());
        admin.topics().deletePartitionedTopic(topic);
        assertFalse(admin.topics().getPartitionedTopicList(namespace).contains(topic));
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.topics().getPartitionedStats(topic, false));
    }
}
