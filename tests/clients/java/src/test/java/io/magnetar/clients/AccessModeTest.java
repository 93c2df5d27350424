package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerAccessMode;
import org.apache.pulsar.client.api.PulsarClientException;
import org.junit.jupiter.api.Test;

/** Producer access modes: Shared, Exclusive, WaitForExclusive, ExclusiveWithFencing. */
class AccessModeTest extends Target {

    private Producer<byte[]> producer(String topic, ProducerAccessMode mode) throws Exception {
        return client.newProducer().topic(topic).accessMode(mode).create();
    }

    @Test
    void sharedProducersCoexist() throws Exception {
        String topic = topic("shared");
        try (Producer<byte[]> a = producer(topic, ProducerAccessMode.Shared);
             Producer<byte[]> b = producer(topic, ProducerAccessMode.Shared)) {
            a.send("a".getBytes());
            b.send("b".getBytes());
        }
    }

    @Test
    void exclusiveRefusesOthers() throws Exception {
        String topic = topic("exclusive");
        try (Producer<byte[]> a = producer(topic, ProducerAccessMode.Exclusive)) {
            a.send("a".getBytes());
            assertThrows(PulsarClientException.ProducerFencedException.class,
                    () -> producer(topic, ProducerAccessMode.Exclusive));
            assertThrows(PulsarClientException.ProducerBusyException.class,
                    () -> producer(topic, ProducerAccessMode.Shared));
        }
    }

    @Test
    void waitForExclusiveTakesOverWhenFree() throws Exception {
        String topic = topic("wait");
        Producer<byte[]> a = producer(topic, ProducerAccessMode.Exclusive);
        CompletableFuture<Producer<byte[]>> waiting = client.newProducer().topic(topic)
                .accessMode(ProducerAccessMode.WaitForExclusive).createAsync();
        Thread.sleep(500);  // a negative check over a stated window: still waiting after it
        assertFalse(waiting.isDone(), "waits while another producer holds the topic");
        a.close();
        try (Producer<byte[]> b = waiting.get(20, TimeUnit.SECONDS)) {
            b.send("b".getBytes());
        }
    }

    @Test
    void exclusiveWithFencingTakesOver() throws Exception {
        String topic = topic("fencing");
        Producer<byte[]> a = producer(topic, ProducerAccessMode.Exclusive);
        try (Producer<byte[]> b = producer(topic, ProducerAccessMode.ExclusiveWithFencing)) {
            b.send("b".getBytes());
            PulsarClientException e = assertThrows(PulsarClientException.class, () -> a.send("a".getBytes()));
            assertFalse(a.isConnected(), "the fenced producer is disconnected: " + e);
        } finally {
            a.closeAsync();
        }
    }
}
