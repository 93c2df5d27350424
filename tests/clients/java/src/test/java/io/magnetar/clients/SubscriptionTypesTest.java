package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;

/** Every subscription type: Exclusive, Shared, Failover, Key_Shared; a zero-queue consumer. */
class SubscriptionTypesTest extends Target {

    private Consumer<String> consumer(String topic, SubscriptionType type, String name) throws Exception {
        return client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                .subscriptionType(type).consumerName(name).receiverQueueSize(10)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
    }

    private void produce(String topic, int n, boolean keyed) throws Exception {
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(topic).enableBatching(false).create()) {
            for (int i = 0; i < n; i++) {
                var b = p.newMessage().value("m" + i);
                if (keyed) {
                    b = b.key("key-" + (i % 10));
                }
                b.sendAsync();
            }
            p.flush();
        }
    }

    /** Receive until {@code total} messages arrived over all consumers (each acknowledged). */
    private Map<String, List<Message<String>>> drain(List<Consumer<String>> consumers, int total) throws Exception {
        Map<String, List<Message<String>>> got = new HashMap<>();
        int count = 0;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (count < total && System.nanoTime() < deadline) {
            for (Consumer<String> c : consumers) {
                Message<String> m = c.receive(20, TimeUnit.MILLISECONDS);
                if (m != null) {
                    got.computeIfAbsent(c.getConsumerName(), k -> new ArrayList<>()).add(m);
                    c.acknowledge(m);
                    count++;
                }
            }
        }
        assertEquals(total, count, "messages received");
        return got;
    }

    @Test
    void exclusiveRefusesASecondConsumer() throws Exception {
        String topic = topic("exclusive");
        try (Consumer<String> first = consumer(topic, SubscriptionType.Exclusive, "a")) {
            assertThrows(PulsarClientException.ConsumerBusyException.class,
                    () -> consumer(topic, SubscriptionType.Exclusive, "b"));
            produce(topic, 5, false);
            assertEquals(5, drain(List.of(first), 5).get("a").size());
        }
    }

    @Test
    void sharedSpreadsOverConsumers() throws Exception {
        String topic = topic("shared");
        try (Consumer<String> a = consumer(topic, SubscriptionType.Shared, "a");
             Consumer<String> b = consumer(topic, SubscriptionType.Shared, "b")) {
            produce(topic, 200, false);
            Map<String, List<Message<String>>> got = drain(List.of(a, b), 200);
            assertTrue(got.containsKey("a") && got.containsKey("b"), "both consumers got messages");
        }
    }

    @Test
    void failoverDeliversToTheActiveConsumerOnly() throws Exception {
        String topic = topic("failover");
        try (Consumer<String> a = consumer(topic, SubscriptionType.Failover, "a");
             Consumer<String> b = consumer(topic, SubscriptionType.Failover, "b")) {
            produce(topic, 50, false);
            Map<String, List<Message<String>>> got = drain(List.of(a, b), 50);
            assertEquals(1, got.size(), "one active consumer: " + got.keySet());
            List<Message<String>> all = got.values().iterator().next();
            for (int i = 0; i < 50; i++) {
                assertEquals("m" + i, all.get(i).getValue());
            }
        }
    }

    @Test
    void keySharedKeepsEachKeyOnOneConsumerInOrder() throws Exception {
        String topic = topic("key-shared");
        try (Consumer<String> a = consumer(topic, SubscriptionType.Key_Shared, "a");
             Consumer<String> b = consumer(topic, SubscriptionType.Key_Shared, "b")) {
            produce(topic, 300, true);
            Map<String, List<Message<String>>> got = drain(List.of(a, b), 300);
            Map<String, String> owner = new HashMap<>();
            Map<String, Integer> last = new HashMap<>();
            for (var e : got.entrySet()) {
                for (Message<String> m : e.getValue()) {
                    String prev = owner.putIfAbsent(m.getKey(), e.getKey());
                    assertTrue(prev == null || prev.equals(e.getKey()), "key " + m.getKey() + " on two consumers");
                    int n = Integer.parseInt(m.getValue().substring(1));
                    Integer before = last.put(m.getKey(), n);
                    assertTrue(before == null || before < n, "key " + m.getKey() + " out of order");
                }
            }
            assertEquals(10, owner.size());
            Set<String> consumersUsed = new HashSet<>(owner.values());
            assertTrue(consumersUsed.size() >= 1);
            assertNull(a.receive(100, TimeUnit.MILLISECONDS));
        }
    }

    @Test
    void zeroQueueConsumerReceivesOneAtATime() throws Exception {
        String topic = topic("zero-queue");
        try (Consumer<String> c = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                .subscriptionType(SubscriptionType.Shared).receiverQueueSize(0)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            produce(topic, 20, false);
            // a zero-queue consumer has no receive with a timeout; receiveAsync asks for one message
            for (int i = 0; i < 20; i++) {
                Message<String> m = c.receiveAsync().get(10, TimeUnit.SECONDS);
                assertEquals("m" + i, m.getValue());
                c.acknowledge(m);
            }
        }
    }
}
