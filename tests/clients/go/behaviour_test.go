package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// Behaviour across connections and sessions: failover take-over, key-based batches on
// Key_Shared, deduplication, the retry letter topic, reader seeks, last message ids and
// non-durable subscriptions.

func TestFailoverTakeOver(t *testing.T) {
	c := newClient(t)
	tp := topic("failover-takeover")
	consumers := map[string]pulsar.Consumer{
		"a": sub(t, c, tp, pulsar.Failover, "a"), "b": sub(t, c, tp, pulsar.Failover, "b")}
	produce(t, c, tp, 20, false)
	active := ""
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; n < 5 && time.Now().Before(deadline); {
		for name, cons := range consumers {
			msg := receive(t, cons, 200*time.Millisecond)
			if msg == nil {
				continue
			}
			if active != "" && active != name {
				t.Fatal("both consumers active")
			}
			if want := fmt.Sprintf("m%d", n); string(msg.Payload()) != want {
				t.Fatalf("got %s, want %s", msg.Payload(), want)
			}
			active = name
			_ = cons.Ack(msg)
			n++
		}
	}
	if active == "" {
		t.Fatal("no consumer received anything")
	}
	consumers[active].Close()
	other := consumers[map[string]string{"a": "b", "b": "a"}[active]]
	for i := 5; i < 20; i++ {
		msg := receive(t, other, 15*time.Second)
		if msg == nil || string(msg.Payload()) != fmt.Sprintf("m%d", i) {
			t.Fatalf("after the take-over, message %d: %v", i, msg)
		}
		_ = other.Ack(msg)
	}
}

func TestKeyBasedBatchesOnKeyShared(t *testing.T) {
	c := newClient(t)
	tp := topic("key-batches")
	a, b := sub(t, c, tp, pulsar.KeyShared, "a"), sub(t, c, tp, pulsar.KeyShared, "b")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, BatcherBuilderType: pulsar.KeyBasedBatchBuilder,
		BatchingMaxMessages: 50, BatchingMaxPublishDelay: 20 * time.Millisecond})
	for i := 0; i < 300; i++ {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m%d", i)),
			Key: fmt.Sprintf("key-%d", i%10)}, nil)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	got := drain(t, map[string]pulsar.Consumer{"a": a, "b": b}, 300)
	checkKeysOnOneConsumerInOrder(t, got)
	if len(got["a"]) == 0 || len(got["b"]) == 0 {
		t.Fatalf("not spread: a=%d b=%d", len(got["a"]), len(got["b"]))
	}
}

func TestDeduplication(t *testing.T) {
	ns := strings.SplitN(namespace, "/", 2)[0] + "/dedup-" + shortID()
	admin(t, "PUT", "/namespaces/"+ns, map[string]any{})
	admin(t, "POST", "/namespaces/"+ns+"/deduplication", true)
	tp := "persistent://" + ns + "/dedup"
	c := newClient(t)
	seq := func(n int64) *int64 { return &n }
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, Name: "dedup-producer", DisableBatching: true})
	for i := 0; i < 3; i++ {
		send(t, p, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m%d", i)), SequenceID: seq(int64(i))})
	}
	p.Close()
	// The new producer numbers on from PRODUCER_SUCCESS's last_sequence_id (2): were it
	// missing, "m3" would get sequence id 0 and be dropped as a duplicate.
	p = mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, Name: "dedup-producer", DisableBatching: true})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("m3")})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("duplicate"), SequenceID: seq(1)})
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub"})
	var got []string
	for msg := receive(t, cons, 2*time.Second); msg != nil; msg = receive(t, cons, 2*time.Second) {
		got = append(got, string(msg.Payload()))
	}
	if strings.Join(got, ",") != "m0,m1,m2,m3" {
		t.Fatalf("stored %v", got)
	}
}

func TestRetryLetterTopic(t *testing.T) {
	c := newClient(t)
	tp := topic("retry")
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub", Type: pulsar.Shared,
		RetryEnable: true, DLQ: &pulsar.DLQPolicy{MaxDeliveries: 3, RetryLetterTopic: tp + "-RETRY",
			DeadLetterTopic: tp + "-DLQ"}})
	produce(t, c, tp, 1, false)
	msg := receive(t, cons, 10*time.Second)
	if msg == nil {
		t.Fatal("no message")
	}
	asked := time.Now()
	cons.ReconsumeLater(msg, 3*time.Second)
	again := receive(t, cons, 15*time.Second)
	if again == nil || string(again.Payload()) != "m0" {
		t.Fatalf("not reconsumed: %v", again)
	}
	// Pulsar delivers a delayed message up to delayedDeliveryTickTimeMillis (1 s) early
	if waited := time.Since(asked); waited < 1900*time.Millisecond {
		t.Fatalf("reconsumed after %v (asked: 3s)", waited)
	}
	if again.Properties()["RECONSUMETIMES"] != "1" {
		t.Fatalf("properties %v", again.Properties())
	}
	if err := cons.Ack(again); err != nil {
		t.Fatal(err)
	}
}

func TestReaderSeeks(t *testing.T) {
	c := newClient(t)
	tp := topic("reader-seek")
	ids := produce(t, c, tp, 5, false)
	time.Sleep(50 * time.Millisecond)
	middle := time.Now()
	time.Sleep(50 * time.Millisecond)
	produce(t, c, tp, 5, false)
	r := reader(t, c, pulsar.ReaderOptions{Topic: tp, StartMessageID: pulsar.EarliestMessageID()})
	if got := readAll(t, r); len(got) != 10 {
		t.Fatalf("read %v", got)
	}
	if err := r.Seek(ids[3]); err != nil {
		t.Fatal(err)
	}
	msg, err := r.Next(ctxFor(t, 10*time.Second))
	if err != nil || string(msg.Payload()) != "m4" {
		t.Fatalf("after seek to m3: %v %v", msg, err)
	}
	if err := r.SeekByTime(middle); err != nil {
		t.Fatal(err)
	}
	msg, err = r.Next(ctxFor(t, 10*time.Second))
	if err != nil || string(msg.Payload()) != "m0" || msg.PublishTime().Before(middle) {
		t.Fatalf("after seek by time: %v %v", msg, err)
	}
}

func TestLastMessageIDsOfAPartitionedTopic(t *testing.T) {
	c := newClient(t)
	tp := topic("last-ids")
	admin(t, "PUT", restPath(tp)+"/partitions", 3)
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub"})
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	last := map[int32]pulsar.MessageID{}
	for i := 0; i < 30; i++ {
		id := send(t, p, &pulsar.ProducerMessage{Payload: []byte("x"), Key: fmt.Sprintf("key-%d", i)})
		last[id.PartitionIdx()] = id
	}
	ids, err := cons.GetLastMessageIDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 {
		t.Fatalf("%d last ids", len(ids))
	}
	// (the Go client leaves PartitionIdx() of these ids at 0: the partition is in Topic())
	for _, id := range ids {
		var idx int32 = -1
		if _, suffix, found := strings.Cut(id.Topic(), "-partition-"); found {
			fmt.Sscanf(suffix, "%d", &idx)
		}
		want, ok := last[idx]
		if !ok || id.LedgerID() != want.LedgerID() || id.EntryID() != want.EntryID() {
			t.Fatalf("last id %v of %s, sent last %v", id, id.Topic(), want)
		}
	}
}

func TestNonDurableSubscriptionLeavesNoCursor(t *testing.T) {
	c := newClient(t)
	tp := topic("non-durable")
	produce(t, c, tp, 5, false)
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "nd",
		SubscriptionMode: pulsar.NonDurable, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if msg := receive(t, cons, 10*time.Second); msg == nil || string(msg.Payload()) != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d: %v", i, msg)
		}
	}
	cons.Close()
	var subs []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := json.Unmarshal(admin(t, "GET", restPath(tp)+"/subscriptions", nil), &subs); err != nil {
			t.Fatal(err)
		}
		if len(subs) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(subs) != 0 {
		t.Fatalf("subscriptions left: %v", subs)
	}
}

func TestTerminatedTopic(t *testing.T) {
	// REACHED_END_OF_TOPIC comes only once everything is acknowledged (the Go client does not
	// know the command and drops the connection on it: sent earlier, messages went missing).
	c := newClient(t)
	tp := topic("terminated")
	produce(t, c, tp, 3, false)
	var last struct {
		LedgerID int64 `json:"ledgerId"`
		EntryID  int64 `json:"entryId"`
	}
	if err := json.Unmarshal(admin(t, "POST", restPath(tp)+"/terminate", nil), &last); err != nil {
		t.Fatal(err)
	}
	if p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: tp}); err == nil {
		p.Close()
		t.Fatal("a producer was accepted on a terminated topic")
	} else if !strings.Contains(err.Error(), "erminated") {
		t.Fatalf("refused, but not as terminated: %v", err)
	}
	got := readAll(t, reader(t, c, pulsar.ReaderOptions{Topic: tp, StartMessageID: pulsar.EarliestMessageID()}))
	if strings.Join(got, ",") != "m0,m1,m2" {
		t.Fatalf("read %v from the terminated topic (last entry %d:%d)", got, last.LedgerID, last.EntryID)
	}
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub"})
	for i := 0; i < 3; i++ {
		msg := receive(t, cons, 10*time.Second)
		if msg == nil || string(msg.Payload()) != fmt.Sprintf("m%d", i) {
			t.Fatalf("consumer, message %d: %v", i, msg)
		}
		_ = cons.Ack(msg)
	}
}
