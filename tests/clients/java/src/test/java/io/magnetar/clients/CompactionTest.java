package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.LongRunningProcessStatus;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.TableView;
import org.junit.jupiter.api.Test;

/**
 * Topic compaction through the admin client (trigger, status), a readCompacted reader that sees
 * each key's latest value (a null value deletes the key; batches looked into per message), and a
 * TableView over the compacted topic that follows new messages.
 */
class CompactionTest extends Target {

    private void compact(String topic) throws Exception {
        admin.topics().triggerCompaction(topic);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        LongRunningProcessStatus status = admin.topics().compactionStatus(topic);
        while (status.status != LongRunningProcessStatus.Status.SUCCESS && System.nanoTime() < deadline) {
            assertTrue(status.status != LongRunningProcessStatus.Status.ERROR, status.lastError);
            TimeUnit.MILLISECONDS.sleep(100);  // polling the status, bounded by the deadline
            status = admin.topics().compactionStatus(topic);
        }
        assertEquals(LongRunningProcessStatus.Status.SUCCESS, status.status);
    }

    @Test
    void compactedReaderAndTableView() throws Exception {
        String topic = topic("compacted");
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(topic)
                .enableBatching(true).batchingMaxMessages(10).create()) {
            for (int i = 0; i < 100; i++) {
                p.newMessage().key("k" + (i % 10)).value("v" + i).sendAsync();
            }
            p.newMessage().key("k0").value(null).sendAsync();  // a tombstone
            p.flush();
        }
        compact(topic);
        Map<String, String> seen = new LinkedHashMap<>();
        int received = 0;
        try (Reader<String> r = client.newReader(Schema.STRING).topic(topic)
                .startMessageId(MessageId.earliest).readCompacted(true).create()) {
            while (r.hasMessageAvailable()) {
                Message<String> m = r.readNext(10, TimeUnit.SECONDS);
                assertNotNull(m);
                seen.put(m.getKey(), m.getValue());
                received++;
            }
        }
        assertEquals(9, received, "one message per live key");
        for (int k = 1; k < 10; k++) {
            assertEquals("v" + (90 + k), seen.get("k" + k));
        }
        try (TableView<String> view = client.newTableViewBuilder(Schema.STRING).topic(topic).create()) {
            assertEquals(9, view.size());
            assertNull(view.get("k0"));
            assertEquals("v95", view.get("k5"));
            try (Producer<String> p = client.newProducer(Schema.STRING).topic(topic).create()) {
                p.newMessage().key("k5").value("live").send();
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (!"live".equals(view.get("k5")) && System.nanoTime() < deadline) {
                TimeUnit.MILLISECONDS.sleep(50);  // the view updates in the background; bounded
            }
            assertEquals("live", view.get("k5"));
        }
    }
}
