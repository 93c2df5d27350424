package clients

import (
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/types/known/timestamppb"
)

type payment struct {
	ID       string  `json:"id" avro:"id"`
	Merchant string  `json:"merchant" avro:"merchant"`
	Amount   float64 `json:"amount" avro:"amount"`
}

type paymentV2 struct {
	ID       string  `avro:"id"`
	Merchant string  `avro:"merchant"`
	Amount   float64 `avro:"amount"`
	Currency *string `avro:"currency"`
}

const paymentAvro = `{"type":"record","name":"Payment","namespace":"magnetar.test","fields":[` +
	`{"name":"id","type":"string"},{"name":"merchant","type":"string"},{"name":"amount","type":"double"}]}`

func roundTrip(t *testing.T, schema pulsar.Schema, value any, decoded any) {
	t.Helper()
	c := newClient(t)
	tp := topic("schema")
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub", Schema: schema})
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, Schema: schema})
	send(t, p, &pulsar.ProducerMessage{Value: value})
	msg := receive(t, cons, 10*time.Second)
	if msg == nil {
		t.Fatal("no message")
	}
	if err := msg.GetSchemaValue(decoded); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if len(msg.SchemaVersion()) == 0 {
		t.Fatal("no schema version on the message")
	}
}

func TestAvroAndJSONRecords(t *testing.T) {
	in := payment{ID: "1", Merchant: "acme", Amount: 9.5}
	var avroOut, jsonOut payment
	roundTrip(t, pulsar.NewAvroSchema(paymentAvro, nil), &in, &avroOut)
	roundTrip(t, pulsar.NewJSONSchema(paymentAvro, nil), &in, &jsonOut)
	if avroOut != in || jsonOut != in {
		t.Fatalf("avro %+v json %+v", avroOut, jsonOut)
	}
}

func TestProtobufNativeAndPrimitives(t *testing.T) {
	ts := timestamppb.New(time.Unix(42, 7))
	var tsOut timestamppb.Timestamp
	roundTrip(t, pulsar.NewProtoNativeSchemaWithMessage(ts, nil), ts, &tsOut)
	if tsOut.Seconds != 42 || tsOut.Nanos != 7 {
		t.Fatalf("protobuf %v", &tsOut)
	}
	var s *string // the Go client's StringSchema decodes into a *string
	roundTrip(t, pulsar.NewStringSchema(nil), "hello", &s)
	var n int64
	roundTrip(t, pulsar.NewInt64Schema(nil), int64(-5), &n)
	var d float64
	roundTrip(t, pulsar.NewDoubleSchema(nil), 0.25, &d)
	if s == nil || *s != "hello" || n != -5 || d != 0.25 {
		t.Fatalf("primitives %v %d %v", s, n, d)
	}
}

func TestEvolvedSchemaGetsANewVersion(t *testing.T) {
	// Two versions of one record schema get two schema versions (history per topic).
	c := newClient(t)
	tp := topic("schema-versions")
	v2 := `{"type":"record","name":"Payment","namespace":"magnetar.test","fields":[` +
		`{"name":"id","type":"string"},{"name":"merchant","type":"string"},{"name":"amount","type":"double"},` +
		`{"name":"currency","type":["null","string"],"default":null}]}`
	p1 := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, Schema: pulsar.NewAvroSchema(paymentAvro, nil)})
	send(t, p1, &pulsar.ProducerMessage{Value: &payment{ID: "1"}})
	p2 := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, Schema: pulsar.NewAvroSchema(v2, nil)})
	eur := "EUR"
	send(t, p2, &pulsar.ProducerMessage{Value: &paymentV2{ID: "2", Currency: &eur}})
	cons := mustConsumer(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "sub"})
	a, b := receive(t, cons, 10*time.Second), receive(t, cons, 10*time.Second)
	if a == nil || b == nil || string(a.SchemaVersion()) == string(b.SchemaVersion()) {
		t.Fatalf("versions %v / %v", a, b)
	}
}
