package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.junit.jupiter.api.Test;

/** Partitioned topics (keyed routing, partition index in message ids) and pattern consumers. */
class PartitionedPatternTest extends Target {

    @Test
    void partitionedTopicWithKeys() throws Exception {
        String topic = topic("partitioned");
        admin.topics().createPartitionedTopic(topic, 3);
        assertEquals(3, client.getPartitionsForTopic(topic).get(10, TimeUnit.SECONDS).size());
        try (Consumer<String> c = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
             Producer<String> p = client.newProducer(Schema.STRING).topic(topic).create()) {
            for (int i = 0; i < 90; i++) {
                p.newMessage().key("key-" + (i % 9)).value("m" + i).sendAsync();
            }
            p.flush();
            Map<String, Integer> partitionOfKey = new HashMap<>();
            Set<Integer> partitions = new HashSet<>();
            for (int i = 0; i < 90; i++) {
                Message<String> m = c.receive(10, TimeUnit.SECONDS);
                assertNotNull(m, "message " + i);
                int partition = partitionOf(m.getMessageId());
                assertEquals(partition, partitionIndexApi(m.getMessageId()), "the client's own API agrees");
                assertTrue(m.getTopicName().endsWith("-partition-" + partition), m.getTopicName());
                Integer before = partitionOfKey.put(m.getKey(), partition);
                assertTrue(before == null || before == partition, "a key on two partitions");
                partitions.add(partition);
                c.acknowledge(m);
            }
            assertTrue(partitions.size() > 1, "keys spread over partitions");
        }
    }

    @Test
    void patternConsumerPicksUpATopicCreatedLater() throws Exception {
        String prefix = "pattern-" + shortId();
        String first = "persistent://" + namespace + "/" + prefix + "-a";
        String later = "persistent://" + namespace + "/" + prefix + "-b";
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(first).create()) {
            p.send("before");
        }
        try (Consumer<String> c = client.newConsumer(Schema.STRING)
                .topicsPattern(Pattern.compile("persistent://" + namespace + "/" + prefix + "-.*"))
                .patternAutoDiscoveryPeriod(1, TimeUnit.SECONDS).subscriptionName("sub")
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            Message<String> m = c.receive(10, TimeUnit.SECONDS);
            assertNotNull(m);
            assertEquals("before", m.getValue());
            c.acknowledge(m);
            try (Producer<String> p = client.newProducer(Schema.STRING).topic(later).create()) {
                p.send("on a new topic");
            }
            Message<String> n = c.receive(30, TimeUnit.SECONDS);
            assertNotNull(n, "the pattern consumer found the new topic");
            assertEquals("on a new topic", n.getValue());
            assertEquals(later, n.getTopicName());
        }
    }

    /**
     * The partition index through the client's API where it has one ({@code MessageIdAdv}, 3.1+),
     * else the serialized form's.
     */
    static int partitionIndexApi(org.apache.pulsar.client.api.MessageId id) throws Exception {
        try {
            Class<?> adv = Class.forName("org.apache.pulsar.client.api.MessageIdAdv");
            assertTrue(adv.isInstance(id), "a 4.0 message id is a MessageIdAdv: " + id.getClass());
            return (Integer) adv.getMethod("getPartitionIndex").invoke(id);
        } catch (ClassNotFoundException older) {
            return partitionOf(id);
        }
    }

    @Test
    void patternConsumerPicksUpAPartitionedTopicCreatedLater() throws Exception {
        String prefix = "ppattern-" + shortId();
        String first = "persistent://" + namespace + "/" + prefix + "-a";
        String later = "persistent://" + namespace + "/" + prefix + "-b";
        admin.topics().createPartitionedTopic(first, 2);
        try (Consumer<String> c = client.newConsumer(Schema.STRING)
                .topicsPattern(Pattern.compile("persistent://" + namespace + "/" + prefix + "-.*"))
                .patternAutoDiscoveryPeriod(1, TimeUnit.SECONDS).subscriptionName("sub")
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            admin.topics().createPartitionedTopic(later, 3);
            // the consumer subscribes to the new topic's partitions on its own; give it the time
            // its discovery needs before producing (Earliest would catch up anyway)
            Set<String> seen = new HashSet<>();
            try (Producer<String> p = client.newProducer(Schema.STRING).topic(later).create()) {
                for (int i = 0; i < 30; i++) {
                    p.newMessage().key("k" + i).value("b" + i).sendAsync();
                }
                p.flush();
            }
            try (Producer<String> p = client.newProducer(Schema.STRING).topic(first).create()) {
                p.send("a0");
            }
            Set<String> partitionsSeen = new HashSet<>();
            for (int i = 0; i < 31; i++) {
                Message<String> m = c.receive(30, TimeUnit.SECONDS);
                assertNotNull(m, "message " + i + " (seen " + seen + ")");
                seen.add(m.getValue());
                partitionsSeen.add(m.getTopicName());
                c.acknowledge(m);
            }
            assertEquals(31, seen.size());
            assertTrue(partitionsSeen.contains(later + "-partition-0") && partitionsSeen.contains(later + "-partition-2"),
                    partitionsSeen.toString());
        }
    }
}
