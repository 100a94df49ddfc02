package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	kgo "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// The example against DynamoDB Local and an in-process Kafka broker: the
// same 2,000 orders as on SQS, each duplicate a new record with the same
// key, plus malformed records that must reach the dead-letter topic with
// their reason.
func TestWorkerOnKafkaAndDynamoDB(t *testing.T) {
	dbEP := testenv.DynamoDBEndpoint(t)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", dbEP)
	t.Setenv("AWS_REGION", testenv.Region)
	t.Setenv("AWS_ACCESS_KEY_ID", testenv.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testenv.SecretAccessKey)
	ctx := context.Background()
	db := ddb.NewFromConfig(awstest.Config(t, ""), func(o *ddb.Options) { o.BaseEndpoint = aws.String(dbEP) })
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)

	f := newOrderFixture()
	malformed := []string{`not json`, `{"order_id":"m-1","sku":"sku-1","qty":-3}`, ``}
	addr, records := orderTopic(t, f, malformed)

	opts, err := parseFlags([]string{"-source", "kafka", "-kafka-brokers", addr, "-store", "dynamodb", "-create-tables",
		"-idempotency-table", "idem_" + suffix, "-inventory-table", "inv_" + suffix, "-orders-table", "orders_" + suffix,
		"-progress", "1h", "-metrics-addr", "127.0.0.1:0"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if opts.kafkaDLQTopic != "orders-dlq" {
		t.Fatalf("dead-letter topic %q, want the orders topic + -dlq", opts.kafkaDLQTopic)
	}
	summary, metrics := runWorker(t, opts, len(records))
	f.check(t, ctx, db, suffix, summary, int64(len(malformed)))

	// A record with the header was claimed under it, not under its order ID.
	store, err := dynamostore.New(db, dynamostore.WithTable("idem_"+suffix))
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"idem-o-12": true, "o-12": false, "o-123": true} {
		k, _ := dedup.Key("onceq", key)
		rec, err := store.Get(ctx, k)
		if found := err == nil && rec.Status == dedup.StatusCompleted; found != want {
			t.Errorf("record %q COMPLETED: %v (%v), want %v", key, found, err, want)
		}
	}

	// Every malformed record is on the dead-letter topic once, with why.
	r := kgo.NewReader(kgo.ReaderConfig{Brokers: []string{addr}, GroupTopics: []string{"orders-dlq"}, GroupID: "dlq-check-" + suffix,
		StartOffset: kgo.FirstOffset, MaxWait: 100 * time.Millisecond})
	defer func() { _ = r.Close() }()
	readCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	reasons := map[string]string{}
	for len(reasons) < len(malformed) {
		m, err := r.FetchMessage(readCtx)
		if err != nil {
			t.Fatalf("dead letters %v: %v", reasons, err)
		}
		for _, h := range m.Headers {
			if h.Key == kafkagroup.ReasonHeader {
				reasons[string(m.Key)] = string(h.Value)
			}
		}
	}
	for i := range malformed {
		if reasons[fmt.Sprintf("bad-%d", i)] == "" {
			t.Errorf("record bad-%d dead-lettered without a reason: %v", i, reasons)
		}
	}
	// The source's own metrics reach the worker's /metrics.
	if n := sample(metrics, "onceq_kafka_dead_letters_total"); n != float64(len(malformed)) {
		t.Errorf("onceq_kafka_dead_letters_total %v, want %d", n, len(malformed))
	}
}

// orderTopic starts an in-process Kafka broker with the topics orders and
// orders-dlq, and produces the fixture's orders (those with an
// even-length ID, and their duplicates, carrying an idempotency-key
// header) and the malformed bodies to orders. It returns the broker's
// address and the records.
func orderTopic(t *testing.T, f orderFixture, malformed []string) (string, []kgo.Message) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(4, "orders", "orders-dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	addr := cluster.ListenAddrs()[0]
	tr := &kgo.Transport{}
	defer tr.CloseIdleConnections()
	var records []kgo.Message
	for _, body := range f.bodies {
		o, err := parseOrder([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		rec := kgo.Message{Key: []byte(o.OrderID), Value: []byte(body)}
		if len(o.OrderID)%2 == 0 {
			// Orders with an even-length ID carry the header, and so do
			// their duplicates: the header, not the order ID, is their key.
			rec.Headers = []kgo.Header{{Key: "idempotency-key", Value: []byte("idem-" + o.OrderID)}}
		}
		records = append(records, rec)
	}
	for i, body := range malformed {
		records = append(records, kgo.Message{Key: fmt.Appendf(nil, "bad-%d", i), Value: []byte(body)})
	}
	w := &kgo.Writer{Addr: kgo.TCP(addr), Topic: "orders", Transport: tr, Balancer: &kgo.Hash{},
		RequiredAcks: kgo.RequireAll, BatchTimeout: time.Millisecond, BatchSize: 500}
	if err := w.WriteMessages(context.Background(), records...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return addr, records
}
