package clients

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

func TestSyncSendWithKeyAndProperties(t *testing.T) {
	c := newClient(t)
	tp := topic("sync")
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub"})
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	id := send(t, p, &pulsar.ProducerMessage{Payload: []byte("hello"), Key: "k1",
		Properties: map[string]string{"a": "1", "b": "2"}})
	msg := receive(t, cons, 10*time.Second)
	if msg == nil {
		t.Fatal("no message")
	}
	if string(msg.Payload()) != "hello" || msg.Key() != "k1" || msg.Properties()["b"] != "2" {
		t.Fatalf("got %q key %q props %v", msg.Payload(), msg.Key(), msg.Properties())
	}
	if msg.ID().LedgerID() != id.LedgerID() || msg.ID().EntryID() != id.EntryID() {
		t.Fatalf("id %v != receipt %v", msg.ID(), id)
	}
	if err := cons.Ack(msg); err != nil {
		t.Fatal(err)
	}
}

func TestAsyncBatchedSendsKeepOrder(t *testing.T) {
	c := newClient(t)
	tp := topic("batched")
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub"})
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, BatchingMaxMessages: 100,
		BatchingMaxPublishDelay: 10 * time.Millisecond})
	var wg sync.WaitGroup
	var failed error
	var mu sync.Mutex
	for i := 0; i < 1000; i++ {
		wg.Add(1)
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m%d", i)),
			Key: fmt.Sprintf("k%d", i%7)}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	for i := 0; i < 1000; i++ {
		msg := receive(t, cons, 10*time.Second)
		if msg == nil || string(msg.Payload()) != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d: %v", i, msg)
		}
		_ = cons.Ack(msg)
	}
}

func TestChunkedMessageArrivesWhole(t *testing.T) {
	c := newClient(t)
	tp := topic("chunked")
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub"})
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true,
		EnableChunking: true, ChunkMaxMessageSize: 64 * 1024})
	big := make([]byte, 300*1024)
	rand.New(rand.NewSource(7)).Read(big)
	send(t, p, &pulsar.ProducerMessage{Payload: big, Key: "big", Properties: map[string]string{"kind": "chunked"}})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("small")})
	msg := receive(t, cons, 20*time.Second)
	if msg == nil || !bytes.Equal(msg.Payload(), big) || msg.Properties()["kind"] != "chunked" {
		t.Fatalf("chunked message not reassembled: %v", msg)
	}
	_ = cons.Ack(msg)
	next := receive(t, cons, 10*time.Second)
	if next == nil || string(next.Payload()) != "small" {
		t.Fatalf("then: %v", next)
	}
}

func TestAccessModes(t *testing.T) {
	c := newClient(t)
	tp := topic("exclusive")
	first := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, ProducerAccessMode: pulsar.ProducerAccessModeExclusive})
	if _, err := c.CreateProducer(pulsar.ProducerOptions{Topic: tp, ProducerAccessMode: pulsar.ProducerAccessModeExclusive}); err == nil {
		t.Fatal("a second exclusive producer was accepted")
	}
	if _, err := c.CreateProducer(pulsar.ProducerOptions{Topic: tp}); err == nil {
		t.Fatal("a shared producer was accepted beside an exclusive one")
	}
	waiting := make(chan pulsar.Producer, 1)
	go func() {
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: tp,
			ProducerAccessMode: pulsar.ProducerAccessModeWaitForExclusive})
		if err == nil {
			waiting <- p
		}
		close(waiting)
	}()
	select {
	case <-waiting:
		t.Fatal("WaitForExclusive did not wait")
	case <-time.After(500 * time.Millisecond):
	}
	first.Close()
	select {
	case p, ok := <-waiting:
		if !ok {
			t.Fatal("WaitForExclusive failed")
		}
		// (the Go client has no ExclusiveWithFencing mode; the Java suite covers it)
		send(t, p, &pulsar.ProducerMessage{Payload: []byte("mine now")})
		p.Close()
	case <-time.After(20 * time.Second):
		t.Fatal("WaitForExclusive never got the topic")
	}
}
