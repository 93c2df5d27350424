package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.google.protobuf.Timestamp;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.schema.GenericRecord;
import org.apache.pulsar.common.schema.SchemaType;
import org.junit.jupiter.api.Test;

/** Schemas: Avro and JSON records, Protobuf, primitives, AUTO_CONSUME, versions via admin. */
class SchemaTest extends Target {

    /** A record as Avro and JSON schemas derive it (public fields, default constructor). */
    public static class Payment {
        public String id;
        public String merchant;
        public double amount;

        public Payment() {
        }

        Payment(String id, String merchant, double amount) {
            this.id = id;
            this.merchant = merchant;
            this.amount = amount;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Payment p && Objects.equals(id, p.id) && Objects.equals(merchant, p.merchant)
                    && amount == p.amount;
        }

        @Override
        public int hashCode() {
            return Objects.hash(id, merchant, amount);
        }
    }

    private <T> void roundTrip(Schema<T> schema, List<T> values) throws Exception {
        String topic = topic("schema-" + schema.getSchemaInfo().getType().name().toLowerCase());
        try (Consumer<T> c = client.newConsumer(schema).topic(topic).subscriptionName("sub")
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
             Producer<T> p = client.newProducer(schema).topic(topic).create()) {
            for (T v : values) {
                p.send(v);
            }
            for (T v : values) {
                Message<T> m = c.receive(10, TimeUnit.SECONDS);
                assertNotNull(m);
                assertEquals(v, m.getValue());
                c.acknowledge(m);
            }
        }
    }

    @Test
    void avroAndJsonRecords() throws Exception {
        List<Payment> payments = List.of(new Payment("1", "acme", 9.5), new Payment("2", "globex", 1.25));
        roundTrip(Schema.AVRO(Payment.class), payments);
        roundTrip(Schema.JSON(Payment.class), payments);
    }

    @Test
    void protobufAndPrimitives() throws Exception {
        roundTrip(Schema.PROTOBUF(Timestamp.class), List.of(Timestamp.newBuilder().setSeconds(42).setNanos(7).build()));
        roundTrip(Schema.STRING, List.of("a", "b"));
        roundTrip(Schema.INT64, List.of(1L, -2L, Long.MAX_VALUE));
        roundTrip(Schema.INT32, List.of(7, -9));
        roundTrip(Schema.BOOL, List.of(true, false));
        roundTrip(Schema.DOUBLE, List.of(0.5, -3.25));
    }

    @Test
    void autoConsumeDecodesWithTheWriterSchema() throws Exception {
        String topic = topic("auto-consume");
        try (Consumer<GenericRecord> c = client.newConsumer(Schema.AUTO_CONSUME()).topic(topic)
                     .subscriptionName("sub").subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                     .subscribe();
             Producer<Payment> p = client.newProducer(Schema.AVRO(Payment.class)).topic(topic).create()) {
            p.send(new Payment("7", "initech", 3.0));
            Message<GenericRecord> m = c.receive(10, TimeUnit.SECONDS);
            assertNotNull(m);
            assertEquals("initech", m.getValue().getField("merchant").toString());
            assertEquals(3.0, (Double) m.getValue().getField("amount"));
        }
    }

    /** Payment with one more field: a second version of the topic's schema. */
    public static class PaymentV2 extends Payment {
        public String currency;

        public PaymentV2() {
        }
    }

    @Test
    void evolvedSchemaGetsANewVersionAndOldMessagesStillDecode() throws Exception {
        String topic = topic("schema-versions");
        try (Producer<Payment> p = client.newProducer(Schema.AVRO(Payment.class)).topic(topic).create()) {
            p.send(new Payment("1", "a", 1));
        }
        try (Producer<PaymentV2> p = client.newProducer(Schema.AVRO(PaymentV2.class)).topic(topic).create()) {
            PaymentV2 v2 = new PaymentV2();
            v2.id = "2";
            v2.merchant = "b";
            v2.amount = 2;
            v2.currency = "EUR";
            p.send(v2);
        }
        try (Consumer<GenericRecord> c = client.newConsumer(Schema.AUTO_CONSUME()).topic(topic)
                .subscriptionName("sub").subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .subscribe()) {
            Message<GenericRecord> first = c.receive(10, TimeUnit.SECONDS);
            Message<GenericRecord> second = c.receive(10, TimeUnit.SECONDS);
            assertNotNull(first.getSchemaVersion(), "messages carry their schema version");
            assertFalse(Arrays.equals(first.getSchemaVersion(), second.getSchemaVersion()));
            assertEquals("a", first.getValue().getField("merchant").toString());
            assertEquals("EUR", second.getValue().getField("currency").toString());
            assertEquals(SchemaType.AVRO, first.getReaderSchema().orElseThrow().getSchemaInfo().getType());
        }
    }

    @Test
    void incompatibleSchemaIsRefused() throws Exception {
        String topic = topic("schema-incompatible");
        try (Producer<Payment> p = client.newProducer(Schema.AVRO(Payment.class)).topic(topic).create()) {
            p.send(new Payment("1", "a", 1));
        }
        assertThrows(PulsarClientException.IncompatibleSchemaException.class,
                () -> client.newProducer(Schema.STRING).topic(topic).create());
    }
}
