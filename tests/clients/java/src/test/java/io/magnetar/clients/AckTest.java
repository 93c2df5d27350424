package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.DeadLetterPolicy;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;

/**
 * Acknowledgements of every kind, ack timeout, negative acks (also of one message of a batch),
 * the dead letter topic and the retry letter topic.
 */
class AckTest extends Target {

    private void produce(String topic, int n, boolean batching) throws Exception {
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(topic).enableBatching(batching)
                .batchingMaxMessages(10).batchingMaxPublishDelay(50, TimeUnit.MILLISECONDS).create()) {
            for (int i = 0; i < n; i++) {
                p.sendAsync("m" + i);
            }
            p.flush();
        }
    }

    private Consumer<String> subscribe(String topic, SubscriptionType type) throws Exception {
        return client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub").subscriptionType(type)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .enableBatchIndexAcknowledgment(true).acknowledgmentGroupTime(0, TimeUnit.MILLISECONDS)
                .isAckReceiptEnabled(true).subscribe();
    }

    private List<String> receiveAll(Consumer<String> c, int max) throws Exception {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < max; i++) {
            Message<String> m = c.receive(1, TimeUnit.SECONDS);
            if (m == null) {
                break;
            }
            out.add(m.getValue());
        }
        return out;
    }

    @Test
    void individualAcksAreNotRedelivered() throws Exception {
        String topic = topic("individual");
        produce(topic, 10, false);
        try (Consumer<String> c = subscribe(topic, SubscriptionType.Shared)) {
            for (int i = 0; i < 10; i++) {
                Message<String> m = c.receive(10, TimeUnit.SECONDS);
                if (i % 2 == 0) {
                    c.acknowledge(m);
                }
            }
        }
        try (Consumer<String> c = subscribe(topic, SubscriptionType.Shared)) {
            assertEquals(List.of("m1", "m3", "m5", "m7", "m9"), receiveAll(c, 10));
        }
    }

    @Test
    void cumulativeAckCoversEverythingBefore() throws Exception {
        String topic = topic("cumulative");
        produce(topic, 10, false);
        try (Consumer<String> c = subscribe(topic, SubscriptionType.Exclusive)) {
            Message<String> m = null;
            for (int i = 0; i < 6; i++) {
                m = c.receive(10, TimeUnit.SECONDS);
            }
            c.acknowledgeCumulative(m);
        }
        try (Consumer<String> c = subscribe(topic, SubscriptionType.Exclusive)) {
            assertEquals(List.of("m6", "m7", "m8", "m9"), receiveAll(c, 10));
        }
    }

    @Test
    void batchIndexAcksRedeliverOnlyTheRest() throws Exception {
        String topic = topic("batch-index");
        produce(topic, 10, true);
        try (Consumer<String> c = subscribe(topic, SubscriptionType.Shared)) {
            for (int i = 0; i < 10; i++) {
                Message<String> m = c.receive(10, TimeUnit.SECONDS);
                if (!m.getValue().equals("m3") && !m.getValue().equals("m8")) {
                    c.acknowledge(m);
                }
            }
        }
        try (Consumer<String> c = subscribe(topic, SubscriptionType.Shared)) {
            assertEquals(List.of("m3", "m8"), receiveAll(c, 10));
        }
    }

    @Test
    void ackTimeoutRedelivers() throws Exception {
        String topic = topic("ack-timeout");
        produce(topic, 1, false);
        try (Consumer<String> c = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                .subscriptionType(SubscriptionType.Shared).ackTimeout(1, TimeUnit.SECONDS)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            Message<String> first = c.receive(10, TimeUnit.SECONDS);
            assertNotNull(first);
            Message<String> again = c.receive(10, TimeUnit.SECONDS);
            assertNotNull(again, "redelivered after the ack timeout");
            assertEquals(first.getMessageId(), again.getMessageId());
            c.acknowledge(again);
        }
    }

    @Test
    void negativeAcksGoToTheDeadLetterTopic() throws Exception {
        String topic = topic("nack");
        String dlq = topic + "-DLQ";
        try (Consumer<String> dead = client.newConsumer(Schema.STRING).topic(dlq).subscriptionName("dlq")
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
             Consumer<String> c = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                     .subscriptionType(SubscriptionType.Shared).negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS)
                     .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(2).deadLetterTopic(dlq).build())
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            produce(topic, 1, false);
            int deliveries = 0;
            while (true) {
                Message<String> m = c.receive(5, TimeUnit.SECONDS);
                if (m == null) {
                    break;
                }
                assertEquals(deliveries, m.getRedeliveryCount());
                deliveries++;
                c.negativeAcknowledge(m);
            }
            assertEquals(3, deliveries, "first delivery + 2 redeliveries");
            Message<String> d = dead.receive(10, TimeUnit.SECONDS);
            assertNotNull(d, "the message reached the DLQ");
            assertEquals("m0", d.getValue());
            assertNull(c.receive(500, TimeUnit.MILLISECONDS));
        }
    }

    @Test
    void negativeAckOfOneBatchMessageRedeliversOnlyIt() throws Exception {
        String topic = topic("batch-nack");
        produce(topic, 10, true);
        try (Consumer<String> c = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                .subscriptionType(SubscriptionType.Shared).enableBatchIndexAcknowledgment(true)
                .acknowledgmentGroupTime(0, TimeUnit.MILLISECONDS)
                .negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            for (int i = 0; i < 10; i++) {
                Message<String> m = c.receive(10, TimeUnit.SECONDS);
                assertNotNull(m, "message " + i);
                if (m.getValue().equals("m4")) {
                    c.negativeAcknowledge(m);
                } else {
                    c.acknowledge(m);
                }
            }
            Message<String> again = c.receive(10, TimeUnit.SECONDS);
            assertNotNull(again, "the negatively acknowledged message comes back");
            assertEquals("m4", again.getValue());
            assertEquals(1, again.getRedeliveryCount());
            c.acknowledge(again);
            assertEquals(List.of(), receiveAll(c, 10), "only the nacked message of the batch came back");
        }
    }

    @Test
    void reconsumeLaterGoesThroughTheRetryTopicToTheDeadLetterTopic() throws Exception {
        String topic = topic("retry");
        String retry = topic + "-RETRY";
        String dlq = topic + "-DLQ";
        try (Consumer<String> dead = client.newConsumer(Schema.STRING).topic(dlq).subscriptionName("dlq")
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
             Consumer<String> c = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                     .subscriptionType(SubscriptionType.Shared).enableRetry(true)
                     .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(2)
                             .retryLetterTopic(retry).deadLetterTopic(dlq).build())
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            produce(topic, 1, false);
            long start = System.currentTimeMillis();
            for (int i = 0; i < 3; i++) {
                Message<String> m = c.receive(15, TimeUnit.SECONDS);
                assertNotNull(m, "delivery " + i);
                assertEquals("m0", m.getValue());
                assertEquals(i == 0 ? null : String.valueOf(i), m.getProperty("RECONSUMETIMES"));
                c.reconsumeLater(m, 2, TimeUnit.SECONDS);
            }
            // two retries, each delayed 2 s (Pulsar may release a delayed message a tick, 1 s, early)
            long waited = System.currentTimeMillis() - start;
            assertTrue(waited >= 1500, "retries were delayed: " + waited + " ms");
            Message<String> d = dead.receive(15, TimeUnit.SECONDS);
            assertNotNull(d, "the message reached the DLQ after the retries");
            assertEquals("m0", d.getValue());
            assertNull(c.receive(1, TimeUnit.SECONDS));
        }
    }
}
