package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.transaction.Transaction;
import org.apache.pulsar.client.api.transaction.TxnID;
import org.apache.pulsar.common.policies.data.TransactionBufferStats;
import org.apache.pulsar.common.policies.data.TransactionCoordinatorStats;
import org.apache.pulsar.common.policies.data.TransactionInBufferStats;
import org.apache.pulsar.common.policies.data.TransactionInPendingAckStats;
import org.apache.pulsar.common.policies.data.TransactionPendingAckStats;
import org.apache.pulsar.common.policies.data.TransactionMetadata;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfSystemProperty;

/**
 * The Java admin client's {@code transactions()} (/admin/v3/transactions): coordinator stats,
 * a live transaction's metadata, slow transactions, aborting one (its message is never
 * delivered; the client can no longer commit it). Runs only against a broker with
 * transactionCoordinatorEnabled (tests/clients/test_java_transactions.py).
 */
@EnabledIfSystemProperty(named = "magnetar.transactions", matches = "true")
class TransactionAdminTest extends Target {
    private PulsarClient txnClient;

    @BeforeAll
    void connectTransactional() throws Exception {
        txnClient = clientBuilder().enableTransaction(true).operationTimeout(30, TimeUnit.SECONDS).build();
    }

    @AfterAll
    void closeTransactional() throws Exception {
        if (txnClient != null) {
            txnClient.close();
        }
    }

    @Test
    void statsMetadataSlowAndAbort() throws Exception {
        Map<Integer, TransactionCoordinatorStats> all = admin.transactions().getCoordinatorStats();
        assertTrue(all.containsKey(0), all.toString());
        assertEquals("Ready", all.get(0).state);
        assertEquals("Ready", admin.transactions().getCoordinatorStatsById(0).state);

        String topic = topic("txn-admin");
        admin.topics().createNonPartitionedTopic(topic);
        admin.topics().createSubscription(topic, "s", org.apache.pulsar.client.api.MessageId.earliest);
        Transaction txn = txnClient.newTransaction().withTransactionTimeout(5, TimeUnit.MINUTES).build()
                .get(30, TimeUnit.SECONDS);
        TxnID id = txn.getTxnID();
        try (Producer<byte[]> p = txnClient.newProducer().topic(topic).sendTimeout(0, TimeUnit.SECONDS).create()) {
            p.newMessage(txn).value("held".getBytes()).send();
        }
        TransactionMetadata meta = admin.transactions().getTransactionMetadata(id);
        assertEquals(id.toString(), meta.txnId);
        assertEquals("OPEN", meta.status);
        assertTrue(meta.producedPartitions.containsKey(topic), meta.producedPartitions.toString());
        assertEquals(TimeUnit.MINUTES.toMillis(5), meta.timeoutAt);  // Pulsar's: the timeout
        assertTrue(meta.openTimestamp > 0);
        assertTrue(admin.transactions().getCoordinatorStatsById(0).ongoingTxnSize >= 1);
        TransactionBufferStats buffer = admin.transactions().getTransactionBufferStats(topic);
        assertEquals(1, buffer.ongoingTxnSize);
        assertEquals("Ready", buffer.state);

        Thread.sleep(20);
        Map<String, TransactionMetadata> slow = admin.transactions().getSlowTransactions(10, TimeUnit.MILLISECONDS);
        assertTrue(slow.containsKey(id.toString()), slow.keySet().toString());
        assertTrue(admin.transactions().getSlowTransactions(1, TimeUnit.HOURS).isEmpty());

        admin.transactions().abortTransaction(id);
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.transactions().getTransactionMetadata(id));
        assertThrows(ExecutionException.class, () -> txn.commit().get(30, TimeUnit.SECONDS));
        assertEquals(0, admin.transactions().getTransactionBufferStats(topic).ongoingTxnSize);
        try (Consumer<byte[]> c = client.newConsumer().topic(topic).subscriptionName("s")
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            assertNull(c.receive(2, TimeUnit.SECONDS), "an aborted transaction's message is never delivered");
        }
    }

    @Test
    void inBufferAndPendingAckStats() throws Exception {
        String topic = topic("txn-stats");
        admin.topics().createNonPartitionedTopic(topic);
        admin.topics().createSubscription(topic, "s", org.apache.pulsar.client.api.MessageId.earliest);
        try (Producer<byte[]> p = txnClient.newProducer().topic(topic).sendTimeout(0, TimeUnit.SECONDS)
                .enableBatching(false).create()) {
            p.send("first".getBytes());
            p.send("second".getBytes());
        }
        Transaction cumulative = txnClient.newTransaction().withTransactionTimeout(5, TimeUnit.MINUTES).build()
                .get(30, TimeUnit.SECONDS);
        Transaction individual = txnClient.newTransaction().withTransactionTimeout(5, TimeUnit.MINUTES).build()
                .get(30, TimeUnit.SECONDS);
        TxnID id = cumulative.getTxnID();
        assertEquals(0, admin.transactions().getPendingAckStats(topic, "s", false).ongoingTxnSize);
        try (Consumer<byte[]> c = txnClient.newConsumer().topic(topic).subscriptionName("s").subscribe();
             Producer<byte[]> p = txnClient.newProducer().topic(topic).sendTimeout(0, TimeUnit.SECONDS).create()) {
            Message<byte[]> first = c.receive(30, TimeUnit.SECONDS);
            Message<byte[]> second = c.receive(30, TimeUnit.SECONDS);
            assertEquals("first", new String(first.getValue()));
            assertEquals("second", new String(second.getValue()));
            c.acknowledgeCumulativeAsync(first.getMessageId(), cumulative).get(30, TimeUnit.SECONDS);
            c.acknowledgeAsync(second.getMessageId(), individual).get(30, TimeUnit.SECONDS);
            p.newMessage(cumulative).value("held".getBytes()).send();
            org.apache.pulsar.client.impl.MessageIdImpl acked =
                    (org.apache.pulsar.client.impl.MessageIdImpl) first.getMessageId();

            // Pulsar counts the transactions holding individual acknowledgements
            TransactionPendingAckStats pending = admin.transactions().getPendingAckStats(topic, "s", false);
            assertEquals(1, pending.ongoingTxnSize);
            assertEquals("Ready", pending.state);
            assertEquals(acked.getLedgerId() + ":" + acked.getEntryId(),
                    admin.transactions().getTransactionInPendingAckStats(id, topic, "s").cumulativeAckPosition);
            assertNull(admin.transactions().getTransactionInPendingAckStats(individual.getTxnID(), topic, "s")
                    .cumulativeAckPosition);

            TransactionInBufferStats inBuffer = admin.transactions().getTransactionInBufferStats(id, topic);
            assertNotNull(inBuffer.startPosition);
            assertFalse(inBuffer.aborted);
            assertNull(admin.transactions().getTransactionInBufferStats(individual.getTxnID(), topic).startPosition);

            admin.transactions().abortTransaction(id);
            individual.abort().get(30, TimeUnit.SECONDS);
            AdminConformanceTest.eventually(() -> {
                try {
                    return admin.transactions().getTransactionInBufferStats(id, topic).aborted
                            && admin.transactions().getPendingAckStats(topic, "s", false).ongoingTxnSize == 0;
                } catch (PulsarAdminException e) {
                    return false;
                }
            }, "the aborts reaching the buffer and the pending acks");
            assertNull(admin.transactions().getTransactionInBufferStats(id, topic).startPosition);
            assertNull(admin.transactions().getTransactionInPendingAckStats(id, topic, "s").cumulativeAckPosition);
        }
    }
}
