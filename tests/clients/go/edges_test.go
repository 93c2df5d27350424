package clients

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// Edges: seek by time over every partition, chunked messages on Key_Shared and partitioned
// topics, a latest-inclusive reader, unsubscribing, event times.

func TestSeekByTimeOnAPartitionedTopic(t *testing.T) {
	c := newClient(t)
	tp := topic("seek-partitioned")
	admin(t, "PUT", restPath(tp)+"/partitions", 3)
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	for i := 0; i < 30; i++ {
		send(t, p, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m%d", i)), Key: fmt.Sprintf("key-%d", i)})
	}
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub"})
	drain(t, map[string]pulsar.Consumer{"c": cons}, 30)
	if err := cons.SeekByTime(time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < 30 && time.Now().Before(deadline) {
		if msg := receive(t, cons, time.Second); msg != nil {
			seen[string(msg.Payload())] = true
			_ = cons.Ack(msg)
		}
	}
	if len(seen) != 30 {
		t.Fatalf("after seeking every partition back: %d of 30", len(seen))
	}
}

func TestChunkedMessagesOnKeySharedAndPartitioned(t *testing.T) {
	c := newClient(t)
	big := func(seed int64) []byte {
		b := make([]byte, 200*1024)
		rand.New(rand.NewSource(seed)).Read(b)
		return b
	}
	// Key_Shared keeps a key's chunks on one consumer. (On Shared with several consumers
	// chunks of one message may go to different consumers; Pulsar hands each consumer runs of
	// up to dispatcherMaxRoundRobinBatchSize entries, so small chunked messages usually land
	// whole, while Magnetar alternates per entry and they never do: a known difference.)
	shared := topic("chunked-key-shared")
	a := sub(t, c, shared, pulsar.KeyShared, "a")
	b := sub(t, c, shared, pulsar.KeyShared, "b")
	parted := topic("chunked-partitioned")
	admin(t, "PUT", restPath(parted)+"/partitions", 3)
	pc := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: parted, SubscriptionName: "sub"})
	for _, tp := range []string{shared, parted} {
		p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true,
			EnableChunking: true, ChunkMaxMessageSize: 50 * 1024})
		for i := 0; i < 4; i++ {
			send(t, p, &pulsar.ProducerMessage{Payload: big(int64(i)), Key: fmt.Sprintf("key-%d", i)})
		}
	}
	for name, got := range map[string][]pulsar.Message{
		"key-shared":  drainAll(t, drain(t, map[string]pulsar.Consumer{"a": a, "b": b}, 4)),
		"partitioned": drainAll(t, drain(t, map[string]pulsar.Consumer{"c": pc}, 4))} {
		for _, m := range got {
			var i int
			fmt.Sscanf(m.Key(), "key-%d", &i)
			if !bytes.Equal(m.Payload(), big(int64(i))) {
				t.Fatalf("%s: chunked message %s not reassembled (%d bytes)", name, m.Key(), len(m.Payload()))
			}
		}
	}
}

func drainAll(_ *testing.T, got map[string][]pulsar.Message) []pulsar.Message {
	var all []pulsar.Message
	for _, msgs := range got {
		all = append(all, msgs...)
	}
	return all
}

func TestLatestInclusiveReaderGetsTheLastMessage(t *testing.T) {
	c := newClient(t)
	tp := topic("latest-inclusive")
	produce(t, c, tp, 5, false)
	r := reader(t, c, pulsar.ReaderOptions{Topic: tp, StartMessageID: pulsar.LatestMessageID(),
		StartMessageIDInclusive: true})
	msg, err := r.Next(ctxFor(t, 10*time.Second))
	if err != nil || string(msg.Payload()) != "m4" {
		t.Fatalf("latest inclusive: %v %v", msg, err)
	}
}

func TestUnsubscribe(t *testing.T) {
	c := newClient(t)
	tp := topic("unsubscribe")
	a := sub(t, c, tp, pulsar.Shared, "a")
	b := sub(t, c, tp, pulsar.Shared, "b")
	if err := a.Unsubscribe(); err == nil {
		t.Fatal("unsubscribed while another consumer was connected")
	}
	b.Close()
	if err := a.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	var subs []string
	if err := json.Unmarshal(admin(t, "GET", restPath(tp)+"/subscriptions", nil), &subs); err != nil {
		t.Fatal(err)
	}
	if len(subs) != 0 {
		t.Fatalf("subscriptions after unsubscribe: %v", subs)
	}
}

func TestEventTimeAndSequenceIDsTravel(t *testing.T) {
	c := newClient(t)
	tp := topic("event-time")
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub"})
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	when := time.UnixMilli(1_700_000_000_123)
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("x"), EventTime: when})
	msg := receive(t, cons, 10*time.Second)
	if msg == nil || !msg.EventTime().Equal(when) || msg.ProducerName() != p.Name() {
		t.Fatalf("event time / producer name: %v", msg)
	}
	if msg.PublishTime().Before(time.Now().Add(-time.Minute)) || msg.PublishTime().After(time.Now().Add(time.Second)) {
		t.Fatalf("publish time %v", msg.PublishTime())
	}
}
