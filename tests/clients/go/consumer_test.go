package clients

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

func produce(t *testing.T, c pulsar.Client, tp string, n int, keyed bool) []pulsar.MessageID {
	t.Helper()
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	ids := make([]pulsar.MessageID, 0, n)
	for i := 0; i < n; i++ {
		msg := &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m%d", i))}
		if keyed {
			msg.Key = fmt.Sprintf("key-%d", i%10)
		}
		ids = append(ids, send(t, p, msg))
	}
	p.Close()
	return ids
}

// drain receives until total messages arrived over all consumers, acknowledging each.
func drain(t *testing.T, consumers map[string]pulsar.Consumer, total int) map[string][]pulsar.Message {
	t.Helper()
	got := map[string][]pulsar.Message{}
	count := 0
	deadline := time.Now().Add(30 * time.Second)
	for count < total && time.Now().Before(deadline) {
		for name, c := range consumers {
			if msg := receive(t, c, 20*time.Millisecond); msg != nil {
				got[name] = append(got[name], msg)
				_ = c.Ack(msg)
				count++
			}
		}
	}
	if count != total {
		t.Fatalf("received %d of %d", count, total)
	}
	return got
}

// checkKeysOnOneConsumerInOrder: each key ("m<n>" payloads) went to one consumer, in order.
func checkKeysOnOneConsumerInOrder(t *testing.T, got map[string][]pulsar.Message) {
	t.Helper()
	owner, last := map[string]string{}, map[string]int{}
	for name, msgs := range got {
		for _, m := range msgs {
			if o, ok := owner[m.Key()]; ok && o != name {
				t.Fatalf("key %s on two consumers", m.Key())
			}
			owner[m.Key()] = name
			var n int
			fmt.Sscanf(string(m.Payload()), "m%d", &n)
			if prev, ok := last[m.Key()]; ok && prev >= n {
				t.Fatalf("key %s out of order", m.Key())
			}
			last[m.Key()] = n
		}
	}
}

func sub(t *testing.T, c pulsar.Client, tp string, typ pulsar.SubscriptionType, name string) pulsar.Consumer {
	return mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub", Type: typ,
		Name: name, ReceiverQueueSize: 10})
}

func TestExclusiveRefusesASecondConsumer(t *testing.T) {
	c := newClient(t)
	tp := topic("exclusive-sub")
	a := sub(t, c, tp, pulsar.Exclusive, "a")
	if _, err := c.Subscribe(pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub", Type: pulsar.Exclusive}); err == nil {
		t.Fatal("a second exclusive consumer was accepted")
	}
	produce(t, c, tp, 5, false)
	drain(t, map[string]pulsar.Consumer{"a": a}, 5)
}

func TestSharedSpreadsOverConsumers(t *testing.T) {
	c := newClient(t)
	tp := topic("shared")
	a, b := sub(t, c, tp, pulsar.Shared, "a"), sub(t, c, tp, pulsar.Shared, "b")
	produce(t, c, tp, 200, false)
	got := drain(t, map[string]pulsar.Consumer{"a": a, "b": b}, 200)
	if len(got["a"]) == 0 || len(got["b"]) == 0 {
		t.Fatalf("not spread: a=%d b=%d", len(got["a"]), len(got["b"]))
	}
}

func TestFailoverDeliversToOneConsumer(t *testing.T) {
	c := newClient(t)
	tp := topic("failover")
	a, b := sub(t, c, tp, pulsar.Failover, "a"), sub(t, c, tp, pulsar.Failover, "b")
	produce(t, c, tp, 50, false)
	got := drain(t, map[string]pulsar.Consumer{"a": a, "b": b}, 50)
	if len(got) != 1 {
		t.Fatalf("two active consumers: a=%d b=%d", len(got["a"]), len(got["b"]))
	}
}

func TestKeySharedKeepsKeysOnOneConsumerInOrder(t *testing.T) {
	c := newClient(t)
	tp := topic("key-shared")
	a, b := sub(t, c, tp, pulsar.KeyShared, "a"), sub(t, c, tp, pulsar.KeyShared, "b")
	produce(t, c, tp, 300, true)
	got := drain(t, map[string]pulsar.Consumer{"a": a, "b": b}, 300)
	checkKeysOnOneConsumerInOrder(t, got)
}

func TestAcksOfEveryKind(t *testing.T) {
	c := newClient(t)
	tp := topic("acks")
	produce(t, c, tp, 10, false)
	opts := pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub", Type: pulsar.Shared, AckWithResponse: true}
	cons := mustConsumer(t, c, opts)
	for i := 0; i < 10; i++ {
		msg := receive(t, cons, 10*time.Second)
		if i%2 == 0 {
			if err := cons.Ack(msg); err != nil {
				t.Fatalf("ack with response: %v", err)
			}
		}
	}
	cons.Close()
	again := mustConsumer(t, c, opts)
	var rest []string
	for msg := receive(t, again, time.Second); msg != nil; msg = receive(t, again, time.Second) {
		rest = append(rest, string(msg.Payload()))
	}
	if strings.Join(rest, ",") != "m1,m3,m5,m7,m9" {
		t.Fatalf("redelivered %v", rest)
	}
	again.Close()

	tp2 := topic("cumulative")
	produce(t, c, tp2, 10, false)
	ex := pulsar.ConsumerOptions{Topic: tp2, SubscriptionName: "sub", Type: pulsar.Exclusive, AckWithResponse: true}
	cons = mustConsumer(t, c, ex)
	var sixth pulsar.Message
	for i := 0; i < 6; i++ {
		sixth = receive(t, cons, 10*time.Second)
	}
	if err := cons.AckCumulative(sixth); err != nil {
		t.Fatal(err)
	}
	cons.Close()
	cons = mustConsumer(t, c, ex)
	if msg := receive(t, cons, 10*time.Second); msg == nil || string(msg.Payload()) != "m6" {
		t.Fatalf("after a cumulative ack of m5: %v", msg)
	}
}

func TestNackAndDeadLetterTopic(t *testing.T) {
	c := newClient(t)
	tp := topic("nack")
	dlq := tp + "-DLQ"
	dead := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: dlq, SubscriptionName: "dlq"})
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub", Type: pulsar.Shared,
		NackRedeliveryDelay: 100 * time.Millisecond,
		DLQ:                 &pulsar.DLQPolicy{MaxDeliveries: 3, DeadLetterTopic: dlq}})
	produce(t, c, tp, 1, false)
	deliveries := 0
	for msg := receive(t, cons, 5*time.Second); msg != nil; msg = receive(t, cons, 5*time.Second) {
		if int(msg.RedeliveryCount()) != deliveries {
			t.Fatalf("redelivery count %d at delivery %d", msg.RedeliveryCount(), deliveries)
		}
		deliveries++
		cons.Nack(msg)
	}
	if deliveries != 3 {
		t.Fatalf("%d deliveries before the DLQ", deliveries)
	}
	if msg := receive(t, dead, 10*time.Second); msg == nil || string(msg.Payload()) != "m0" {
		t.Fatalf("DLQ: %v", msg)
	}
}
