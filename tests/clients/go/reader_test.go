package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

func readAll(t *testing.T, r pulsar.Reader) []string {
	t.Helper()
	var out []string
	for r.HasNext() {
		msg, err := r.Next(ctxFor(t, 10*time.Second))
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		out = append(out, string(msg.Payload()))
		if len(out) > 10000 {
			t.Fatal("the HasNext loop does not end")
		}
	}
	return out
}

func reader(t *testing.T, c pulsar.Client, opts pulsar.ReaderOptions) pulsar.Reader {
	t.Helper()
	r, err := c.CreateReader(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func TestReadersFromEveryStartPosition(t *testing.T) {
	c := newClient(t)
	tp := topic("reader")
	ids := produce(t, c, tp, 10, false)
	if got := readAll(t, reader(t, c, pulsar.ReaderOptions{Topic: tp, StartMessageID: pulsar.EarliestMessageID()})); len(got) != 10 {
		t.Fatalf("from earliest: %v", got)
	}
	got := readAll(t, reader(t, c, pulsar.ReaderOptions{Topic: tp, StartMessageID: ids[4]}))
	if strings.Join(got, ",") != "m5,m6,m7,m8,m9" {
		t.Fatalf("after m4: %v", got)
	}
	got = readAll(t, reader(t, c, pulsar.ReaderOptions{Topic: tp, StartMessageID: ids[4], StartMessageIDInclusive: true}))
	if len(got) == 0 || got[0] != "m4" {
		t.Fatalf("from m4 inclusive: %v", got)
	}
	latest := reader(t, c, pulsar.ReaderOptions{Topic: tp, StartMessageID: pulsar.LatestMessageID()})
	if latest.HasNext() {
		t.Fatal("a reader from latest has a message")
	}
	produce(t, c, tp, 1, false)
	msg, err := latest.Next(ctxFor(t, 10*time.Second))
	if err != nil || string(msg.Payload()) != "m0" {
		t.Fatalf("new message: %v %v", msg, err)
	}
}

func TestHasNextLoopEndsOnOnePartition(t *testing.T) {
	c := newClient(t)
	tp := topic("readerpart") // (a "-partition-" inside a name reads as a partition index)
	admin(t, "PUT", restPath(tp)+"/partitions", 3)
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp})
	for i := 0; i < 3000; i++ {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m%d", i)),
			Key: fmt.Sprintf("key-%d", i%97)}, nil)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	var stats struct {
		MsgInCounter int `json:"msgInCounter"`
	}
	if err := json.Unmarshal(admin(t, "GET", restPath(tp)+"-partition-0/stats", nil), &stats); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, reader(t, c, pulsar.ReaderOptions{Topic: tp + "-partition-0", StartMessageID: pulsar.EarliestMessageID()}))
	if len(got) != stats.MsgInCounter || len(got) == 0 {
		t.Fatalf("read %d of the partition's %d", len(got), stats.MsgInCounter)
	}
}

func TestSeekByIDAndByTime(t *testing.T) {
	c := newClient(t)
	tp := topic("seek")
	ids := produce(t, c, tp, 5, false)
	time.Sleep(50 * time.Millisecond) // the two groups' publish times differ
	middle := time.Now()
	time.Sleep(50 * time.Millisecond)
	produce(t, c, tp, 5, false)
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub"})
	for i := 0; i < 10; i++ {
		_ = cons.Ack(receive(t, cons, 10*time.Second))
	}
	if err := cons.Seek(ids[2]); err != nil {
		t.Fatal(err)
	}
	// the Go consumer drops the seek position itself (exclusive, like the Java client)
	if msg := receive(t, cons, 10*time.Second); msg == nil || string(msg.Payload()) != "m3" {
		t.Fatalf("after seek to m2: %v", msg)
	}
	if err := cons.SeekByTime(middle); err != nil {
		t.Fatal(err)
	}
	var msg pulsar.Message
	for msg = receive(t, cons, 10*time.Second); msg != nil && msg.PublishTime().Before(middle); msg = receive(t, cons, 10*time.Second) {
	}
	if msg == nil || string(msg.Payload()) != "m0" {
		t.Fatalf("after seek by time: %v", msg)
	}
}

func TestPartitionedTopicWithKeys(t *testing.T) {
	c := newClient(t)
	tp := topic("partitioned")
	admin(t, "PUT", restPath(tp)+"/partitions", 3)
	parts, err := c.TopicPartitions(tp)
	if err != nil || len(parts) != 3 {
		t.Fatalf("partitions %v %v", parts, err)
	}
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub"})
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp})
	for i := 0; i < 90; i++ {
		send(t, p, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m%d", i)), Key: fmt.Sprintf("key-%d", i%9)})
	}
	partitionOfKey, seen := map[string]int32{}, map[int32]bool{}
	for i := 0; i < 90; i++ {
		msg := receive(t, cons, 10*time.Second)
		if msg == nil {
			t.Fatalf("message %d missing", i)
		}
		idx := msg.ID().PartitionIdx()
		if !strings.HasSuffix(msg.Topic(), fmt.Sprintf("-partition-%d", idx)) {
			t.Fatalf("id partition %d, topic %s", idx, msg.Topic())
		}
		if prev, ok := partitionOfKey[msg.Key()]; ok && prev != idx {
			t.Fatalf("key %s on two partitions", msg.Key())
		}
		partitionOfKey[msg.Key()] = idx
		seen[idx] = true
		_ = cons.Ack(msg)
	}
	if len(seen) < 2 {
		t.Fatalf("keys on %d partition(s)", len(seen))
	}
}

func TestPatternConsumerFindsATopicCreatedLater(t *testing.T) {
	c := newClient(t)
	prefix := "pattern-" + shortID()
	first := "persistent://" + namespace + "/" + prefix + "-a"
	later := "persistent://" + namespace + "/" + prefix + "-b"
	produce(t, c, first, 1, false)
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{
		TopicsPattern:       "persistent://" + namespace + "/" + regexp.QuoteMeta(prefix) + "-.*",
		SubscriptionName:    "sub",
		AutoDiscoveryPeriod: time.Second,
	})
	if msg := receive(t, cons, 10*time.Second); msg == nil {
		t.Fatal("nothing from the first topic")
	} else {
		_ = cons.Ack(msg)
	}
	produce(t, c, later, 1, false)
	msg := receive(t, cons, 30*time.Second)
	if msg == nil || msg.Topic() != later {
		t.Fatalf("the pattern consumer did not pick up %s: %v", later, msg)
	}
}
