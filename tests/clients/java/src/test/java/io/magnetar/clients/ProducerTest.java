package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;

/** Producers: sync, async, batched and chunked sends with keys and properties; delayed delivery. */
class ProducerTest extends Target {

    private Consumer<byte[]> subscribe(String topic) throws Exception {
        return client.newConsumer().topic(topic).subscriptionName("sub")
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
    }

    @Test
    void syncSendWithKeyAndProperties() throws Exception {
        String topic = topic("sync");
        try (Consumer<byte[]> consumer = subscribe(topic);
             Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false).create()) {
            MessageId id = producer.newMessage().key("k1").property("a", "1").property("b", "2")
                    .value("hello".getBytes()).send();
            assertNotNull(id);
            Message<byte[]> msg = consumer.receive(10, TimeUnit.SECONDS);
            assertNotNull(msg);
            assertEquals("hello", new String(msg.getValue()));
            assertEquals("k1", msg.getKey());
            assertEquals(Map.of("a", "1", "b", "2"), msg.getProperties());
            assertEquals(id, msg.getMessageId());
            assertEquals(producer.getProducerName(), msg.getProducerName());
            consumer.acknowledge(msg);
        }
    }

    @Test
    void asyncAndBatchedSendsKeepOrder() throws Exception {
        String topic = topic("batched");
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
                     .subscriptionName("sub").subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                     .subscribe();
             Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
                     .enableBatching(true).batchingMaxMessages(100)
                     .batchingMaxPublishDelay(10, TimeUnit.MILLISECONDS).create()) {
            List<CompletableFuture<MessageId>> sent = new ArrayList<>();
            for (int i = 0; i < 1000; i++) {
                sent.add(producer.newMessage().key("k" + (i % 7)).value("m" + i).sendAsync());
            }
            CompletableFuture.allOf(sent.toArray(new CompletableFuture[0])).get(30, TimeUnit.SECONDS);
            for (int i = 0; i < 1000; i++) {
                Message<String> msg = consumer.receive(10, TimeUnit.SECONDS);
                assertNotNull(msg, "message " + i);
                assertEquals("m" + i, msg.getValue());
                assertEquals("k" + (i % 7), msg.getKey());
                consumer.acknowledge(msg);
            }
            assertEquals(producer.getLastSequenceId(), 999);
        }
    }

    @Test
    void chunkedMessageArrivesWhole() throws Exception {
        String topic = topic("chunked");
        byte[] big = new byte[300 * 1024];
        new Random(7).nextBytes(big);
        try (Consumer<byte[]> consumer = subscribe(topic);
             Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false)
                     .enableChunking(true).chunkMaxMessageSize(64 * 1024).create()) {
            producer.newMessage().key("big").property("kind", "chunked").value(big).send();
            producer.send("small".getBytes());
            Message<byte[]> msg = consumer.receive(20, TimeUnit.SECONDS);
            assertNotNull(msg);
            assertArrayEquals(big, msg.getValue());
            assertEquals("chunked", msg.getProperty("kind"));
            consumer.acknowledge(msg);
            Message<byte[]> next = consumer.receive(10, TimeUnit.SECONDS);
            assertNotNull(next);
            assertEquals("small", new String(next.getValue()));
            assertTrue(admin.topics().getInternalStats(topic).numberOfEntries >= 6, "stored as chunks");
        }
    }

    @Test
    void delayedDeliveryOnASharedSubscription() throws Exception {
        String topic = topic("delayed");
        try (Consumer<String> c = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                     .subscriptionType(SubscriptionType.Shared)
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
             Producer<String> p = client.newProducer(Schema.STRING).topic(topic).enableBatching(false).create()) {
            long sentAt = System.currentTimeMillis();
            p.newMessage().value("later").deliverAfter(3, TimeUnit.SECONDS).send();
            p.send("now");
            Message<String> first = c.receive(10, TimeUnit.SECONDS);
            assertNotNull(first);
            assertEquals("now", first.getValue(), "the delayed message is held back");
            c.acknowledge(first);
            Message<String> second = c.receive(10, TimeUnit.SECONDS);
            assertNotNull(second, "the delayed message arrives");
            assertEquals("later", second.getValue());
            // Pulsar may release a delayed message up to one tick (1 s) early
            long waited = System.currentTimeMillis() - sentAt;
            assertTrue(waited >= 1500, "delivered after " + waited + " ms");
            c.acknowledge(second);
        }
    }
}
