package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.junit.jupiter.api.Test;

/**
 * Readers from every start position (also inside a batch), the hasMessageAvailable loop (also on
 * one partition and over a whole partitioned topic), seek by id and by time.
 */
class ReaderSeekTest extends Target {

    private List<MessageId> produce(String topic, int n) throws Exception {
        List<MessageId> ids = new ArrayList<>();
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(topic).enableBatching(false).create()) {
            for (int i = 0; i < n; i++) {
                ids.add(p.send("m" + i));
            }
        }
        return ids;
    }

    private List<String> readAll(Reader<String> reader) throws Exception {
        List<String> out = new ArrayList<>();
        while (reader.hasMessageAvailable()) {
            Message<String> m = reader.readNext(10, TimeUnit.SECONDS);
            assertNotNull(m);
            out.add(m.getValue());
            assertTrue(out.size() <= 10_000, "the hasMessageAvailable loop does not end");
        }
        return out;
    }

    @Test
    void readersFromEveryStartPosition() throws Exception {
        String topic = topic("reader");
        List<MessageId> ids = produce(topic, 10);
        try (Reader<String> r = client.newReader(Schema.STRING).topic(topic).startMessageId(MessageId.earliest).create()) {
            assertEquals(10, readAll(r).size());
        }
        try (Reader<String> r = client.newReader(Schema.STRING).topic(topic).startMessageId(ids.get(4)).create()) {
            assertEquals(List.of("m5", "m6", "m7", "m8", "m9"), readAll(r));
        }
        try (Reader<String> r = client.newReader(Schema.STRING).topic(topic).startMessageId(ids.get(4))
                .startMessageIdInclusive().create()) {
            assertEquals("m4", readAll(r).get(0));
        }
        try (Reader<String> r = client.newReader(Schema.STRING).topic(topic).startMessageId(MessageId.latest).create()) {
            assertFalse(r.hasMessageAvailable());
            produce(topic, 1);
            assertEquals("m0", r.readNext(10, TimeUnit.SECONDS).getValue());
        }
    }

    @Test
    void hasMessageAvailableLoopEndsOnOnePartition() throws Exception {
        String topic = topic("readerpart");  // a partitioned topic's name has no "-partition-"
        admin.topics().createPartitionedTopic(topic, 3);
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(topic).create()) {
            for (int i = 0; i < 3000; i++) {
                p.newMessage().key("key-" + (i % 97)).value("m" + i).sendAsync();
            }
            p.flush();
        }
        long inPartition = admin.topics().getStats(topic + "-partition-0").getMsgInCounter();
        try (Reader<String> r = client.newReader(Schema.STRING).topic(topic + "-partition-0")
                .startMessageId(MessageId.earliest).create()) {
            assertEquals(inPartition, readAll(r).size());
        }
    }

    @Test
    void seekByIdAndByTime() throws Exception {
        String topic = topic("seek");
        List<MessageId> ids = produce(topic, 5);
        Thread.sleep(50);  // publish times of the two groups differ
        long middle = System.currentTimeMillis();
        Thread.sleep(50);  // clock step, not a wait for a state
        produce(topic, 5);
        try (Consumer<String> c = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            for (int i = 0; i < 10; i++) {
                c.acknowledge(c.receive(10, TimeUnit.SECONDS));
            }
            c.seek(ids.get(2));
            // the Java consumer drops the seek position itself (resetIncludeHead=false)
            assertEquals("m3", c.receive(10, TimeUnit.SECONDS).getValue());
            c.seek(middle);
            Message<String> m = c.receive(10, TimeUnit.SECONDS);
            assertEquals("m0", m.getValue());
            assertTrue(m.getPublishTime() >= middle);
            c.seek(MessageId.earliest);
            assertEquals("m0", c.receive(10, TimeUnit.SECONDS).getValue());
        }
    }

    @Test
    void readersFromAnIdInsideABatch() throws Exception {
        String topic = topic("reader-batch");
        List<CompletableFuture<MessageId>> sent = new ArrayList<>();
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(topic).enableBatching(true)
                .batchingMaxMessages(10).batchingMaxPublishDelay(1, TimeUnit.SECONDS).create()) {
            for (int i = 0; i < 10; i++) {
                sent.add(p.sendAsync("m" + i));
            }
            p.flush();
        }
        List<MessageId> ids = new ArrayList<>();
        for (CompletableFuture<MessageId> f : sent) {
            ids.add(f.get(10, TimeUnit.SECONDS));
        }
        assertEquals(1, admin.topics().getInternalStats(topic).entriesAddedCounter, "one batch");
        try (Reader<String> r = client.newReader(Schema.STRING).topic(topic).startMessageId(MessageId.earliest).create()) {
            assertEquals(10, readAll(r).size());
        }
        try (Reader<String> r = client.newReader(Schema.STRING).topic(topic).startMessageId(ids.get(4)).create()) {
            assertEquals(List.of("m5", "m6", "m7", "m8", "m9"), readAll(r));
        }
        try (Reader<String> r = client.newReader(Schema.STRING).topic(topic).startMessageId(ids.get(4))
                .startMessageIdInclusive().create()) {
            assertEquals(List.of("m4", "m5", "m6", "m7", "m8", "m9"), readAll(r));
        }
    }

    @Test
    void hasMessageAvailableLoopEndsOverAPartitionedTopic() throws Exception {
        String topic = topic("readerall");
        admin.topics().createPartitionedTopic(topic, 3);
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(topic).create()) {
            for (int i = 0; i < 300; i++) {
                p.newMessage().key("key-" + (i % 31)).value("m" + i).sendAsync();
            }
            p.flush();
        }
        try (Reader<String> r = client.newReader(Schema.STRING).topic(topic).startMessageId(MessageId.earliest).create()) {
            List<String> all = readAll(r);
            assertEquals(300, all.size());
            assertEquals(300, new java.util.HashSet<>(all).size());
        }
    }
}
