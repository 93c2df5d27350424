package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.transaction.Transaction;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.condition.EnabledIfSystemProperty;

/**
 * A broker SIGKILLed mid-transaction (tests/clients/test_java_transactions.py drives the
 * phases): {@code write} opens one transaction it commits and one it leaves open, both over
 * two topics, and signals (a file) as the commit goes out; the broker is killed and
 * restarted; {@code check} reads both topics up to a fence sent after the restart, which
 * becomes visible only once both transactions are resolved: the committed one is there on
 * both topics or on neither, the open one on neither.
 */
@EnabledIfSystemProperty(named = "magnetar.txnPhase", matches = "write|check")
@Timeout(value = 180, unit = TimeUnit.SECONDS)
public class TransactionKillTest {
    static final int N = 100;

    static String prop(String name) {
        return System.getProperty(name);
    }

    static PulsarClient client() throws Exception {
        return Target.clientBuilder().enableTransaction(true)
                .operationTimeout(30, TimeUnit.SECONDS).build();
    }

    static Consumer<byte[]> consumer(PulsarClient c, String topic) throws Exception {
        return c.newConsumer().topic(topic).subscriptionName("check")
                .subscriptionType(SubscriptionType.Shared)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
    }

    @Test
    void phase() throws Exception {
        String a = prop("magnetar.txnTopic") + "-a";
        String b = prop("magnetar.txnTopic") + "-b";
        if (prop("magnetar.txnPhase").equals("write")) {
            write(a, b);
        } else {
            check(a, b);
        }
    }

    void write(String a, String b) throws Exception {
        PulsarClient c = client();
        consumer(c, a).close();
        consumer(c, b).close();
        Producer<byte[]> pa = c.newProducer().topic(a).sendTimeout(0, TimeUnit.SECONDS).create();
        Producer<byte[]> pb = c.newProducer().topic(b).sendTimeout(0, TimeUnit.SECONDS).create();
        Transaction open = c.newTransaction().withTransactionTimeout(10, TimeUnit.SECONDS).build().get();
        Transaction commit = c.newTransaction().withTransactionTimeout(60, TimeUnit.SECONDS).build().get();
        List<CompletableFuture<?>> sends = new ArrayList<>();
        for (int i = 0; i < N; i++) {
            sends.add(pa.newMessage(open).value(("o-" + i).getBytes()).sendAsync());
            sends.add(pb.newMessage(open).value(("o-" + i).getBytes()).sendAsync());
            sends.add(pa.newMessage(commit).value(("c-" + i).getBytes()).sendAsync());
            sends.add(pb.newMessage(commit).value(("c-" + i).getBytes()).sendAsync());
        }
        CompletableFuture.allOf(sends.toArray(new CompletableFuture[0])).get();
        CompletableFuture<Void> committing = commit.commit();
        Files.writeString(Path.of(prop("magnetar.txnSignal")), "committing");
        String outcome;
        try {
            committing.get(60, TimeUnit.SECONDS);
            outcome = "commit answered";
        } catch (Exception e) {
            outcome = "commit failed: " + e;
        }
        System.out.println("TXN-KILL write: " + outcome);
        c.shutdown();
    }

    void check(String a, String b) throws Exception {
        PulsarClient c = client();
        List<List<String>> seen = new ArrayList<>();
        for (String t : List.of(a, b)) {
            try (Producer<byte[]> p = c.newProducer().topic(t).create(); Consumer<byte[]> r = consumer(c, t)) {
                p.send("fence".getBytes());
                List<String> got = new ArrayList<>();
                while (true) {
                    Message<byte[]> m = r.receive(120, TimeUnit.SECONDS);
                    assertNotNull(m, t + ": the fence never came after " + got.size() + " messages");
                    r.acknowledge(m);
                    String text = new String(m.getValue(), StandardCharsets.UTF_8);
                    if (text.equals("fence")) {
                        break;
                    }
                    got.add(text);
                }
                seen.add(got);
            }
        }
        for (List<String> got : seen) {
            assertTrue(got.stream().noneMatch(s -> s.startsWith("o-")), "the open transaction leaked");
        }
        int ca = seen.get(0).size();
        int cb = seen.get(1).size();
        assertEquals(ca, cb, "the committed transaction is on one topic only: " + ca + " vs " + cb);
        assertTrue(ca == 0 || ca == N, "the committed transaction is half there: " + ca);
        if (ca == N) {
            List<String> expected = new ArrayList<>();
            for (int i = 0; i < N; i++) {
                expected.add("c-" + i);
            }
            assertEquals(expected, seen.get(0));
            assertEquals(expected, seen.get(1));
        }
        System.out.println("TXN-KILL check: committed transaction " + (ca == N ? "COMMITTED" : "ABORTED")
                + " on both topics (" + ca + " messages each)");
        c.close();
    }
}
