package clients

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Scenarios beyond the Java suite's list: batch-index acks, compression, delayed delivery,
// multi-topic consumers, non-persistent topics, shared producers, PROTOBUF (Avro-described)
// schemas and a refused schema change.

func TestBatchIndexAcks(t *testing.T) {
	c := newClient(t)
	tp := topic("batch-index")
	opts := pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub", Type: pulsar.Shared,
		EnableBatchIndexAcknowledgment: true}
	cons := mustConsumer(t, c, opts)
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, BatchingMaxMessages: 10,
		BatchingMaxPublishDelay: time.Second})
	for i := 0; i < 10; i++ {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m%d", i))}, nil)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		msg := receive(t, cons, 10*time.Second)
		if msg == nil {
			t.Fatalf("message %d missing", i)
		}
		if msg.ID().BatchSize() != 10 || msg.ID().BatchIdx() != int32(i) {
			t.Fatalf("message %d is not index %d of one batch of 10: %v", i, i, msg.ID())
		}
		if i%2 == 0 {
			if err := cons.Ack(msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	cons.Close() // flushes the grouped acks
	again := mustConsumer(t, c, opts)
	var rest []string
	for msg := receive(t, again, 2*time.Second); msg != nil; msg = receive(t, again, 2*time.Second) {
		rest = append(rest, string(msg.Payload()))
	}
	if strings.Join(rest, ",") != "m1,m3,m5,m7,m9" {
		t.Fatalf("redelivered after acking the even indexes: %v", rest)
	}
}

func TestCompressedBatches(t *testing.T) {
	kinds := map[string]pulsar.CompressionType{"LZ4": pulsar.LZ4, "ZLib": pulsar.ZLib, "ZSTD": pulsar.ZSTD}
	for name, kind := range kinds {
		t.Run(name, func(t *testing.T) {
			c := newClient(t)
			tp := topic("compressed")
			cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub"})
			p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, CompressionType: kind,
				BatchingMaxMessages: 50, BatchingMaxPublishDelay: 20 * time.Millisecond})
			payload := func(i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("m%d.", i)), 200) }
			for i := 0; i < 100; i++ {
				p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: payload(i)}, nil)
			}
			if err := p.Flush(); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 100; i++ {
				msg := receive(t, cons, 10*time.Second)
				if msg == nil || !bytes.Equal(msg.Payload(), payload(i)) {
					t.Fatalf("message %d: %v", i, msg)
				}
				_ = cons.Ack(msg)
			}
		})
	}
}

func TestDelayedDeliveryOnShared(t *testing.T) {
	c := newClient(t)
	tp := topic("delayed")
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub", Type: pulsar.Shared})
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	start := time.Now()
	// Pulsar delivers a delayed message up to delayedDeliveryTickTimeMillis (1 s) early
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("later"), DeliverAfter: 3 * time.Second})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("now")})
	first := receive(t, cons, 10*time.Second)
	if first == nil || string(first.Payload()) != "now" {
		t.Fatalf("first: %v", first)
	}
	_ = cons.Ack(first)
	second := receive(t, cons, 10*time.Second)
	if second == nil || string(second.Payload()) != "later" {
		t.Fatalf("the delayed message: %v", second)
	}
	if waited := time.Since(start); waited < 1900*time.Millisecond {
		t.Fatalf("the delayed message came after %v (asked: 3s)", waited)
	}
	_ = cons.Ack(second)
}

func TestMultiTopicConsumer(t *testing.T) {
	c := newClient(t)
	a, b := topic("multi-a"), topic("multi-b")
	produce(t, c, a, 5, false)
	produce(t, c, b, 7, false)
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topics: []string{a, b}, SubscriptionName: "sub"})
	got := drain(t, map[string]pulsar.Consumer{"multi": cons}, 12)
	perTopic := map[string]int{}
	for _, m := range got["multi"] {
		perTopic[m.Topic()]++
	}
	if perTopic[a] != 5 || perTopic[b] != 7 {
		t.Fatalf("per topic: %v", perTopic)
	}
}

func TestNonPersistentTopic(t *testing.T) {
	c := newClient(t)
	tp := "non-persistent://" + namespace + "/np-" + shortID()
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub"})
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	for i := 0; i < 10; i++ {
		send(t, p, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m%d", i)), Key: "k"})
	}
	for i := 0; i < 10; i++ {
		msg := receive(t, cons, 10*time.Second)
		if msg == nil || string(msg.Payload()) != fmt.Sprintf("m%d", i) || msg.Key() != "k" {
			t.Fatalf("message %d: %v", i, msg)
		}
		_ = cons.Ack(msg)
	}
}

func TestSharedProducersCoexist(t *testing.T) {
	c := newClient(t)
	tp := topic("shared-producers")
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub"})
	p1 := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, ProducerAccessMode: pulsar.ProducerAccessModeShared})
	p2 := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, ProducerAccessMode: pulsar.ProducerAccessModeShared})
	if p1.Name() == p2.Name() {
		t.Fatalf("two producers named %s", p1.Name())
	}
	send(t, p1, &pulsar.ProducerMessage{Payload: []byte("one")})
	send(t, p2, &pulsar.ProducerMessage{Payload: []byte("two")})
	got := drain(t, map[string]pulsar.Consumer{"c": cons}, 2)
	if string(got["c"][0].Payload()) != "one" || got["c"][1].ProducerName() != p2.Name() {
		t.Fatalf("got %v", got["c"])
	}
}

// google.protobuf.Timestamp described in Avro, as the Java client's ProtobufSchema does.
const timestampAvro = `{"type":"record","name":"Timestamp","namespace":"google.protobuf","fields":[` +
	`{"name":"seconds","type":"long","default":0},{"name":"nanos","type":"int","default":0}]}`

func TestProtobufSchema(t *testing.T) {
	ts := timestamppb.New(time.Unix(1234, 56))
	var out timestamppb.Timestamp
	roundTrip(t, pulsar.NewProtoSchema(timestampAvro, nil), ts, &out)
	if out.Seconds != 1234 || out.Nanos != 56 {
		t.Fatalf("protobuf %v", &out)
	}
}

func TestIncompatibleSchemaIsRefused(t *testing.T) {
	c := newClient(t)
	tp := topic("schema-refused")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, Schema: pulsar.NewStringSchema(nil)})
	send(t, p, &pulsar.ProducerMessage{Value: "text"})
	if other, err := c.CreateProducer(pulsar.ProducerOptions{Topic: tp, Schema: pulsar.NewInt64Schema(nil)}); err == nil {
		other.Close()
		t.Fatal("an INT64 producer was accepted on a STRING topic")
	} else if !strings.Contains(err.Error(), "ncompatible") {
		t.Fatalf("refused, but not as an incompatible schema: %v", err)
	}
}
