package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.transaction.Transaction;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfSystemProperty;

/**
 * Transactions with the official client ({@code enableTransaction(true)}): commit and abort
 * across two topics, and consume-transform-produce with transactional acknowledgements. Runs
 * only against a broker with transactionCoordinatorEnabled (tests/clients/test_java_transactions.py
 * sets {@code magnetar.transactions=true}).
 */
@EnabledIfSystemProperty(named = "magnetar.transactions", matches = "true")
public class TransactionTest extends Target {
    private PulsarClient txnClient;

    @BeforeAll
    void connectTransactional() throws Exception {
        txnClient = clientBuilder()
                .enableTransaction(true)
                .operationTimeout(30, TimeUnit.SECONDS)
                .build();
    }

    @AfterAll
    void closeTransactional() throws Exception {
        if (txnClient != null) {
            txnClient.close();
        }
    }

    /**
     * Fresh topic names; with {@code magnetar.spread=true} (a cluster) names are drawn until
     * one of the topics is served by another broker than the transaction coordinator, so its
     * decisions must travel to that broker (END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION).
     */
    private List<String> topics(String... names) throws Exception {
        if (!Boolean.getBoolean("magnetar.spread")) {
            List<String> out = new ArrayList<>();
            for (String name : names) {
                out.add(topic(name));
            }
            return out;
        }
        String coordinator = admin.lookups().lookupTopic(
                "persistent://pulsar/system/transaction_coordinator_assign-partition-0");
        for (int attempt = 0; attempt < 32; attempt++) {
            List<String> out = new ArrayList<>();
            Set<String> owners = new HashSet<>();
            for (String name : names) {
                String t = topic(name);
                out.add(t);
                txnClient.newProducer().topic(t).create().close();  // the bundle gets an owner
                owners.add(admin.lookups().lookupTopic(t));
            }
            owners.remove(coordinator);
            if (!owners.isEmpty()) {
                return out;
            }
        }
        throw new AssertionError("every topic landed on the coordinator's broker " + coordinator);
    }

    private Producer<byte[]> producer(String topic) throws Exception {
        return txnClient.newProducer().topic(topic).sendTimeout(0, TimeUnit.SECONDS)
                .enableBatching(false).create();
    }

    private Consumer<byte[]> consumer(String topic, String sub) throws Exception {
        return txnClient.newConsumer().topic(topic).subscriptionName(sub)
                .subscriptionType(SubscriptionType.Shared)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
    }

    private Transaction txn() throws Exception {
        return txnClient.newTransaction().withTransactionTimeout(60, TimeUnit.SECONDS).build().get();
    }

    private static String text(Message<byte[]> m) {
        return new String(m.getValue(), StandardCharsets.UTF_8);
    }

    /** What the consumer gets up to (and including) the message {@code last}. */
    private static List<String> until(Consumer<byte[]> c, String last) throws Exception {
        List<String> got = new ArrayList<>();
        while (true) {
            Message<byte[]> m = c.receive(30, TimeUnit.SECONDS);
            assertNotNull(m, "timed out waiting for " + last + " after " + got);
            c.acknowledge(m);
            got.add(text(m));
            if (text(m).equals(last)) {
                return got;
            }
        }
    }

    @Test
    void commitAndAbortAcrossTwoTopics() throws Exception {
        List<String> names = topics("txn-a", "txn-b");
        String a = names.get(0);
        String b = names.get(1);
        try (Consumer<byte[]> ca = consumer(a, "s"); Consumer<byte[]> cb = consumer(b, "s");
                Producer<byte[]> pa = producer(a); Producer<byte[]> pb = producer(b)) {
            Transaction committed = txn();
            Transaction aborted = txn();
            pa.newMessage(committed).value("a-commit".getBytes()).send();
            pb.newMessage(committed).value("b-commit".getBytes()).send();
            pa.newMessage(aborted).value("a-abort".getBytes()).send();
            pb.newMessage(aborted).value("b-abort".getBytes()).send();
            pa.send("a-plain".getBytes());
            // nothing is visible while both transactions are open
            assertEquals(null, ca.receive(1, TimeUnit.SECONDS));
            aborted.abort().get();
            committed.commit().get();
            pa.send("a-fence".getBytes());
            pb.send("b-fence".getBytes());
            assertEquals(List.of("a-commit", "a-plain", "a-fence"), until(ca, "a-fence"));
            assertEquals(List.of("b-commit", "b-fence"), until(cb, "b-fence"));
        }
    }

    @Test
    void consumeTransformProduce() throws Exception {
        List<String> names = topics("ctp-in", "ctp-out");
        String in = names.get(0);
        String out = names.get(1);
        int n = 20;
        try (Consumer<byte[]> work = consumer(in, "work"); Consumer<byte[]> result = consumer(out, "r");
                Producer<byte[]> source = producer(in); Producer<byte[]> sink = producer(out)) {
            for (int i = 0; i < n; i++) {
                source.send(("m" + i).getBytes());
            }
            int done = 0;
            int aborts = 0;
            List<String> processed = new ArrayList<>();
            while (done < n) {
                Message<byte[]> m = work.receive(30, TimeUnit.SECONDS);
                assertNotNull(m, "input message missing after " + processed);
                Transaction t = txn();
                sink.newMessage(t).value(("out-" + text(m)).getBytes()).send();
                work.acknowledgeAsync(m.getMessageId(), t).get();
                // the first attempt at every third message aborts: it must come back
                if (Integer.parseInt(text(m).substring(1)) % 3 == 0 && !processed.contains("x" + text(m))) {
                    processed.add("x" + text(m));
                    t.abort().get();
                    aborts++;
                    continue;
                }
                t.commit().get();
                processed.add(text(m));
                done++;
            }
            assertTrue(aborts > 0);
            sink.send("fence".getBytes());
            List<String> outputs = until(result, "fence");
            List<String> expected = new ArrayList<>();
            for (String p : processed) {
                if (!p.startsWith("x")) {
                    expected.add("out-" + p);
                }
            }
            expected.add("fence");
            assertEquals(expected, outputs, "every input exactly once in the output, no aborted one");
            assertEquals(0, admin.topics().getStats(in).getSubscriptions().get("work").getMsgBacklog());
        }
    }
}
