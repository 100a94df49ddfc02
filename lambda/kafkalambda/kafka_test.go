package kafkalambda_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/lambdatest"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/grouptest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/lambda/kafkalambda"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

// createTopic creates a topic on the shared broker; each test names its own.
func createTopic(t testing.TB, addr, topic string, partitions int) {
	t.Helper()
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafkago.Client{Addr: kafkago.TCP(addr), Transport: tr}
	resp, err := c.CreateTopics(testenv.Context(t, 10*time.Second), &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{
		{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1},
	}})
	if err == nil {
		err = resp.Errors[topic]
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// produce writes records to one partition and reads them back as fetched.
func produce(t testing.TB, addr, topic string, partition int, msgs ...kafkago.Message) []kafkago.Message {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	conn, err := kafkago.DialLeader(ctx, "tcp", addr, topic, partition)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	if _, err := conn.WriteMessages(msgs...); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if _, err := conn.Seek(0, kafkago.SeekAbsolute); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	batch := conn.ReadBatch(1, 10<<20)
	defer batch.Close()
	var out []kafkago.Message
	for len(out) < len(msgs) {
		m, err := batch.ReadMessage()
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		out = append(out, m)
	}
	return out
}

// kafkaEvent makes fetched records a Kafka event, as the event source
// mapping does: key and value base64, headers as byte arrays.
func kafkaEvent(ms ...kafkago.Message) events.KafkaEvent {
	ev := events.KafkaEvent{EventSource: "SelfManagedKafka", Records: map[string][]events.KafkaRecord{}}
	for _, m := range ms {
		r := events.KafkaRecord{
			Topic: m.Topic, Partition: int64(m.Partition), Offset: m.Offset,
			Timestamp: events.MilliSecondsEpochTime{Time: m.Time}, TimestampType: "CREATE_TIME",
			Key: base64.StdEncoding.EncodeToString(m.Key), Value: base64.StdEncoding.EncodeToString(m.Value),
			Headers: []map[string]events.JSONNumberBytes{},
		}
		for _, h := range m.Headers {
			r.Headers = append(r.Headers, map[string]events.JSONNumberBytes{h.Key: h.Value})
		}
		p := m.Topic + "-" + strconv.Itoa(m.Partition)
		ev.Records[p] = append(ev.Records[p], r)
	}
	return ev
}

// TestKafka: partitions run in offset order; a duplicate (a producer's
// retried send at a new offset) takes effect once, a poison record goes
// to the dead-letter topic, and a failing record stops its partition and
// is where Lambda resumes it. Keys are kafkasource.Fingerprint's, as with
// package kafkasource's Source.
func TestKafka(t *testing.T) {
	t.Parallel()
	tb := lambdatest.NewTables(t)
	addr := testenv.KafkaBrokers(t)
	topic, dlqTopic := grouptest.TopicName(t, "orders"), grouptest.TopicName(t, "orders-dlq")
	createTopic(t, addr, topic, 2)
	createTopic(t, addr, dlqTopic, 1)

	p0 := produce(t, addr, topic, 0,
		kafkago.Message{Key: []byte("k-a"), Value: []byte(`{"id":"a"}`)},
		kafkago.Message{Key: []byte("k-a"), Value: []byte(`{"id":"a"}`)}, // a retried send
		kafkago.Message{Key: []byte("k-p"), Value: []byte(`{"id":"p","poison":true}`), Headers: []kafkago.Header{{Key: "trace", Value: []byte("t1")}}},
		kafkago.Message{Key: []byte("k-d"), Value: []byte(`{"id":"d"}`)},
	)
	p1 := produce(t, addr, topic, 1,
		kafkago.Message{Key: []byte("k-b"), Value: []byte(`{"id":"b"}`)},
		kafkago.Message{Key: []byte("k-x"), Value: []byte(`{"id":"x","fail":true}`)},
		kafkago.Message{Key: []byte("k-c"), Value: []byte(`{"id":"c"}`), Headers: []kafkago.Header{{Key: "idempotency-key", Value: []byte("order-c")}}},
	)
	env := tb.Env()
	env["TESTFUNC_KAFKA_BROKER"], env["TESTFUNC_KAFKA_DLQ"] = addr, dlqTopic
	f := lambdatest.Start(t, bootstrap, 30, env)
	ctx := testenv.Context(t, time.Minute)

	inv := f.Invoke(ctx, kafkaEvent(append(p0, p1...)...))
	if inv.TimedOut || inv.ErrMessage != "" {
		t.Fatalf("invocation failed: %s", inv.Body)
	}
	var resp kafkalambda.EventResponse
	if err := json.Unmarshal(inv.Body, &resp); err != nil {
		t.Fatalf("response %s: %v", inv.Body, err)
	}
	want := kafkalambda.ItemIdentifier{Partition: topic + "-1", Offset: p1[1].Offset}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != want {
		t.Fatalf("response %s, want partition 1 to resume at the failed record %+v", inv.Body, want)
	}
	eff := tb.Effects(t)
	if eff["a"] != 1 || eff["d"] != 1 || eff["b"] != 1 || eff["p"] != 0 || eff["x"] != 0 || eff["c"] != 0 {
		t.Errorf("effects %v, want a, b, d once; none for p (poison), x (failed) or c (after x)", eff)
	}

	// The record's key is the one package kafkasource's Source claims.
	store, err := dynamostore.New(tb.Client, dynamostore.WithTable(tb.Idempotency))
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := kafkasource.Fingerprint(kafkasource.ToMessage(p0[0], 1))
	key, _ := dedup.DerivedKey("onceq", fp)
	if rec, err := store.Get(ctx, key); err != nil || rec.Status != dedup.StatusCompleted {
		t.Errorf("record under kafkasource.Fingerprint's key: %+v, %v; want COMPLETED", rec, err)
	}

	// Lambda resumes partition 1 at x: x fails again, c still waits.
	inv = f.Invoke(ctx, kafkaEvent(p1[1:]...))
	if err := json.Unmarshal(inv.Body, &resp); err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != want {
		t.Errorf("resumed batch: %s, want %+v again", inv.Body, want)
	}

	// Partition 0's first records delivered again (a redelivery across
	// batches): duplicates, nothing reported, nothing applied again.
	inv = f.Invoke(ctx, kafkaEvent(p0[:2]...))
	if err := json.Unmarshal(inv.Body, &resp); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Errorf("partition 0 again: %s, want no failures", inv.Body)
	}
	if eff := tb.Effects(t); eff["a"] != 1 || eff["d"] != 1 {
		t.Errorf("effects after the redelivery %v, want a and d still once", eff)
	}

	// The dead letter carries the record and why.
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{addr}, Topic: dlqTopic, Partition: 0, MaxWait: 200 * time.Millisecond})
	defer r.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := r.ReadMessage(rctx)
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	{
		hs := map[string]string{}
		for _, h := range m.Headers {
			hs[h.Key] = string(h.Value)
		}
		if string(m.Value) != `{"id":"p","poison":true}` || hs[kafkagroup.ReasonHeader] == "" || hs["trace"] != "t1" ||
			hs[kafkagroup.OriginalOffsetHeader] != fmt.Sprint(p0[2].Offset) {
			t.Errorf("dead letter %s with headers %v; want the poison record, its headers, a reason and its offset", m.Value, hs)
		}
	}
}

// TestKafkaFunctionTimeout: the function is stopped by its timeout in the
// middle of a partition. The next invocation reports the held record as
// where the partition resumes, and takes it over once its lease (capped at
// the stopped invocation's deadline) and the skew margin have passed.
func TestKafkaFunctionTimeout(t *testing.T) {
	t.Parallel()
	tb := lambdatest.NewTables(t)
	addr := testenv.KafkaBrokers(t)
	topic := grouptest.TopicName(t, "slow")
	createTopic(t, addr, topic, 1)
	recs := produce(t, addr, topic, 0,
		kafkago.Message{Key: []byte("1"), Value: []byte(`{"id":"k1"}`)},
		kafkago.Message{Key: []byte("2"), Value: []byte(`{"id":"k2","sleep_first_ms":8000}`)},
		kafkago.Message{Key: []byte("3"), Value: []byte(`{"id":"k3"}`)},
	)
	env := tb.Env()
	env["TESTFUNC_SKEW"] = "1s"
	const timeout = 3
	f := lambdatest.Start(t, bootstrap, timeout, env)
	ctx := testenv.Context(t, time.Minute)

	start := time.Now()
	if inv := f.Invoke(ctx, kafkaEvent(recs...)); !inv.TimedOut {
		t.Fatalf("the first invocation should time out: %s", inv.Body)
	}
	// Lambda sends the batch again. The lease of k2 lives: it is where
	// partition 0 resumes, and k3 waits behind it.
	var resp kafkalambda.EventResponse
	inv := f.Invoke(ctx, kafkaEvent(recs...))
	want := kafkalambda.ItemIdentifier{Partition: topic + "-0", Offset: recs[1].Offset}
	if err := json.Unmarshal(inv.Body, &resp); err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != want {
		t.Fatalf("second invocation: %s, want partition 0 to resume at %+v", inv.Body, want)
	}
	if eff := tb.Effects(t); eff["k1"] != 1 || eff["k3"] != 0 {
		t.Fatalf("effects %v: k1 once, k3 not before k2", eff)
	}
	// The lease ended at the first invocation's deadline at the latest;
	// with the skew margin (1s, whole seconds) it is taken over after.
	// Wall-clock time must pass for DynamoDB and the function, another
	// process: no fake clock reaches them.
	time.Sleep(time.Until(start.Add(timeout*time.Second + 2200*time.Millisecond)))
	// Lambda resumes at k2.
	inv = f.Invoke(ctx, kafkaEvent(recs[1:]...))
	if err := json.Unmarshal(inv.Body, &resp); inv.TimedOut || err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("third invocation: %s, want no failures", inv.Body)
	}
	if eff := tb.Effects(t); eff["k1"] != 1 || eff["k2"] != 1 || eff["k3"] != 1 {
		t.Errorf("effects %v, want each once", eff)
	}
}

// A store that does not answer the claims makes the invocation say so in
// its log, naming the table and the endpoint, what it waited for and for
// how long, and give the partition back at its first record (reported,
// not failed), in time to answer.
func TestKafkaStoreDownLogged(t *testing.T) {
	t.Parallel()
	tb := lambdatest.NewTables(t)
	proxy := faultproxy.Start(t, tb.Endpoint)
	proxy.AddRule(faultproxy.Rule{Op: "PutItem", Table: tb.Idempotency, Fault: faultproxy.Latency, Delay: time.Minute,
		Body: func(body []byte) bool { return !strings.Contains(string(body), "onceq-check#") }})
	addr := testenv.KafkaBrokers(t)
	topic := grouptest.TopicName(t, "storedown")
	createTopic(t, addr, topic, 1)
	recs := produce(t, addr, topic, 0,
		kafkago.Message{Key: []byte("1"), Value: []byte(`{"id":"d1"}`)},
		kafkago.Message{Key: []byte("2"), Value: []byte(`{"id":"d2"}`)},
	)
	env := tb.Env()
	env["TESTFUNC_DDB_ENDPOINT"] = proxy.URL()
	f := lambdatest.Start(t, bootstrap, 30, env)

	inv := f.Invoke(testenv.Context(t, time.Minute), kafkaEvent(recs...))
	var resp kafkalambda.EventResponse
	want := kafkalambda.ItemIdentifier{Partition: topic + "-0", Offset: recs[0].Offset}
	if err := json.Unmarshal(inv.Body, &resp); inv.TimedOut || err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != want {
		t.Fatalf("invocation: %s, want partition 0 given back at %+v", inv.Body, want)
	}
	if eff := tb.Effects(t); len(eff) != 0 {
		t.Errorf("effects %v, want none", eff)
	}
	store := "DynamoDB table " + tb.Idempotency + " (" + proxy.URL() + ")"
	for _, what := range []string{"waiting for the store", "store unavailable"} {
		line := ""
		for l := range strings.Lines(f.Log()) {
			if strings.Contains(l, what) {
				line = l
				break
			}
		}
		for _, want := range []string{store, "waiting_for=Claim", "waited="} {
			if !strings.Contains(line, want) {
				t.Errorf("line %q: want %q in it", line, want)
			}
		}
	}
}
