package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/memsource"
)

// outcomes hands each message's outcome to the test, in order.
type outcomes chan outcomeOf

type outcomeOf struct {
	body string
	o    consumer.Outcome
}

func (c outcomes) OnMessageOutcome(_ context.Context, m *consumer.Message, o consumer.Outcome, _ time.Duration) {
	c <- outcomeOf{string(m.Body), o}
}

// pipeline is a running consumer on a memory queue; next sends one message
// and returns its outcome.
type pipeline struct {
	t    *testing.T
	q    *memsource.Queue
	outs outcomes
}

func startPipeline(t *testing.T, store dedup.Store, h consumer.Handler, opts ...consumer.Option) *pipeline {
	t.Helper()
	p := &pipeline{t: t, q: memsourcetest.NewQueue(t, "orders"), outs: make(outcomes, 16)}
	c, err := consumer.New(p.q.Source(), store, h, append([]consumer.Option{consumer.Concurrency(2), consumer.WithKeyFunc(orderKey),
		consumer.WithHooks(p.outs)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	})
	return p
}

func (p *pipeline) next(body string, attrs map[string]string) consumer.Outcome {
	p.t.Helper()
	if err := p.q.Send(context.Background(), memsource.Outgoing{Body: []byte(body), Attributes: attrs}); err != nil {
		p.t.Fatal(err)
	}
	select {
	case got := <-p.outs:
		if got.body != body {
			p.t.Fatalf("outcome of %.40q, want of %.40q", got.body, body)
		}
		return got.o
	case <-time.After(10 * time.Second):
		p.t.Fatalf("no outcome for %.40q", body)
		return consumer.Outcome{}
	}
}

// alive checks the worker still processes a valid order.
func (p *pipeline) alive(id string) {
	p.t.Helper()
	if o := p.next(fmt.Sprintf(`{"order_id":%q,"sku":"sku-1","qty":1}`, id), nil); o.Kind != consumer.Processed {
		p.t.Fatalf("valid order %s after bad input: %v (%v)", id, o.Kind, o.Err)
	}
}

func malformedField(t *testing.T, o consumer.Outcome, field string) {
	t.Helper()
	var me *MalformedOrderError
	if o.Kind != consumer.DeadLettered || !errors.As(o.Err, &me) || me.Field != field {
		t.Fatalf("outcome %v (%v), want dead-lettered with a *MalformedOrderError on %q", o.Kind, o.Err, field)
	}
}

// The bad-input corpus through the order worker's real pipeline (consumer,
// memory queue and store, the reservation handler): each case has its
// defined outcome and typed error, and a valid order still goes through
// after it. The bad-input table of docs/development.md lists the same outcomes.
func TestBadInputCorpus(t *testing.T) {
	p := startPipeline(t, memstoretest.New(t), reserveHandler(newMemoryInventory(100, 1_000_000)))
	key := func(k string) map[string]string { return map[string]string{consumer.IdempotencyKeyAttribute: k} }
	order := func(id string) string { return fmt.Sprintf(`{"order_id":%q,"sku":"sku-2","qty":2}`, id) }
	// 1 MiB is the most SQS delivers (256 KiB on older queues); the worker
	// adds no lower limit of its own.
	big := `{"order_id":"big","sku":"sku-1","qty":1,"note":"` + strings.Repeat("x", 1<<20-64) + `"}`
	longKey := strings.Repeat("k", 10<<10)

	cases := []struct {
		name  string
		body  string
		attrs map[string]string
		check func(t *testing.T, o consumer.Outcome)
	}{
		{"not JSON", `not json`, nil, func(t *testing.T, o consumer.Outcome) { malformedField(t, o, "body") }},
		{"not JSON, keyed", `not json`, key("bad-1"), func(t *testing.T, o consumer.Outcome) { malformedField(t, o, "body") }},
		{"empty body", ``, nil, func(t *testing.T, o consumer.Outcome) { malformedField(t, o, "body") }},
		{"1 MiB order", big, nil, func(t *testing.T, o consumer.Outcome) {
			if o.Kind != consumer.Processed {
				t.Fatalf("outcome %v (%v), want processed: the broker bounds the body, not the worker", o.Kind, o.Err)
			}
		}},
		{"256 KB not JSON", strings.Repeat("x", 256<<10), nil, func(t *testing.T, o consumer.Outcome) { malformedField(t, o, "body") }},
		{"negative qty", `{"order_id":"neg","sku":"sku-1","qty":-3}`, nil, func(t *testing.T, o consumer.Outcome) { malformedField(t, o, "qty") }},
		{"qty not a number", `{"order_id":"str","sku":"sku-1","qty":"2"}`, nil, func(t *testing.T, o consumer.Outcome) { malformedField(t, o, "qty") }},
		{"empty idempotency key", order("empty-key"), key(""), func(t *testing.T, o consumer.Outcome) {
			if o.Kind != consumer.DeadLettered || !errors.Is(o.Err, dedup.ErrEmptyKey) {
				t.Fatalf("outcome %v (%v), want dead-lettered with dedup.ErrEmptyKey", o.Kind, o.Err)
			}
		}},
		{"10 KB key", order("long-key"), key(longKey), func(t *testing.T, o consumer.Outcome) {
			// The store maps it onto its limits (DynamoDB stores its hash).
			if o.Kind != consumer.Processed {
				t.Fatalf("outcome %v (%v), want processed", o.Kind, o.Err)
			}
		}},
		{"10 KB key again", order("long-key"), key(longKey), func(t *testing.T, o consumer.Outcome) {
			if o.Kind != consumer.Duplicate {
				t.Fatalf("outcome %v (%v), want the long key to be found again (duplicate)", o.Kind, o.Err)
			}
		}},
		{"non-UTF-8 key", order("bad-utf8"), key("o-\xff\xfe"), func(t *testing.T, o consumer.Outcome) {
			if o.Kind != consumer.Processed {
				t.Fatalf("outcome %v (%v), want processed", o.Kind, o.Err)
			}
		}},
		{"unknown fields", `{"order_id":"extra","sku":"sku-1","qty":1,"gift_wrap":true}`, nil, func(t *testing.T, o consumer.Outcome) {
			if o.Kind != consumer.Processed {
				t.Fatalf("outcome %v (%v), want processed: unknown fields are accepted", o.Kind, o.Err)
			}
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.check(t, p.next(c.body, c.attrs))
			p.alive(fmt.Sprintf("alive-%d", i))
		})
	}
	// Every dead letter carries its reason. The outcome hook runs before
	// the source is told, so the last ones may still be on their way.
	dls := p.q.DeadLetters()
	for deadline := time.Now().Add(10 * time.Second); len(dls) < 7 && time.Now().Before(deadline); dls = p.q.DeadLetters() {
		time.Sleep(5 * time.Millisecond) // polling a condition under a deadline
	}
	if len(dls) != 7 {
		t.Fatalf("%d dead letters, want 7", len(dls))
	}
	for _, d := range dls {
		if !strings.Contains(d.Reason, "malformed order") && !strings.Contains(d.Reason, "empty idempotency key") {
			t.Errorf("dead letter %.40q: reason %q", d.Message.Body, d.Reason)
		}
	}
}

// freshTable creates a records table on DynamoDB Local, named prefix and a
// random suffix, and returns a client, the table and the suffix (for the
// test's keys to be its own too).
func freshTable(t *testing.T, prefix string, opts ...dynamostore.TableOption) (db *ddb.Client, table, suffix string) {
	t.Helper()
	ep := testenv.DynamoDBEndpoint(t)
	db = ddb.NewFromConfig(awstest.Config(t, ""), func(o *ddb.Options) { o.BaseEndpoint = aws.String(ep) })
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix = hex.EncodeToString(b)
	table = prefix + suffix
	if err := dynamostore.CreateTable(context.Background(), db, table, opts...); err != nil {
		t.Fatal(err)
	}
	return db, table, suffix
}

// A handler response over the store's limit (256 KiB by default; DynamoDB's
// own item limit is 400 KB), on DynamoDB Local: the store refuses it before
// sending with a *dedup.ResponseTooLargeError, the message is dead-lettered
// once (the handler is not called again: no retry storm) and the worker
// goes on.
func TestBadInputResponseOverLimit(t *testing.T) {
	db, table, _ := freshTable(t, "badinput_")
	var bigCalls atomic.Int64
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		o, err := parseOrder(m.Body)
		if err != nil {
			return consumer.Result{}, consumer.Permanent(err)
		}
		if o.OrderID == "huge-response" {
			bigCalls.Add(1)
			return consumer.Result{Response: make([]byte, 401<<10)}, nil
		}
		return consumer.Result{Response: reservedResponse}, nil
	})
	store, err := dynamostore.New(db, dynamostore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	p := startPipeline(t, store, h)

	o := p.next(`{"order_id":"huge-response","sku":"sku-1","qty":1}`, nil)
	var tl *dedup.ResponseTooLargeError
	if o.Kind != consumer.DeadLettered || !errors.As(o.Err, &tl) || tl.Size <= tl.Max || tl.Max != dedup.DefaultMaxResponseSize {
		t.Fatalf("outcome %v (%v), want dead-lettered with a *dedup.ResponseTooLargeError over the default limit", o.Kind, o.Err)
	}
	p.alive("after-huge")
	if n := bigCalls.Load(); n != 1 {
		t.Fatalf("handler ran %d times for the oversized response, want once", n)
	}
	if dls := p.q.DeadLetters(); len(dls) != 1 || !strings.Contains(dls[0].Reason, "MaxResponseSize") {
		t.Fatalf("dead letters %v", dls)
	}
}

// No key in any log line or error text: keys may hold personal data. The
// bad-input cases that put a key into an error path (key reuse, a
// malformed body under a key, a key too long for the tenant layout's sort
// key, a non-UTF-8 key) run through the consumer and the DynamoDB store
// with every log line kept at debug level; neither the lines, the outcome
// errors nor the dead letters' reasons may hold a key. They carry its hash.
func TestNoKeyInLogsOrErrors(t *testing.T) {
	db, table, suffix := freshTable(t, "nokey_", dynamostore.NamespaceLayout())
	logs := &testenv.LogBuffer{}
	logger := logs.Logger(slog.LevelDebug)
	store, err := dynamostore.New(db, dynamostore.WithTable(table), dynamostore.NamespaceLayout(), dynamostore.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		if _, err := parseOrder(m.Body); err != nil {
			return consumer.Result{}, consumer.Permanent(err)
		}
		return consumer.Result{Response: reservedResponse}, nil
	})
	p := startPipeline(t, store, h, consumer.WithLogger(logger))

	secret := "customer-4711-" + suffix
	keys := map[string]string{
		"reused":  secret + "-reused",
		"bad":     secret + "-bad-body",
		"long":    secret + "-long-" + strings.Repeat("x", 1500),
		"notutf8": secret + "-\xff\xfe",
	}
	attrs := func(k string) map[string]string { return map[string]string{consumer.IdempotencyKeyAttribute: k} }
	var texts []string
	check := func(o consumer.Outcome, want consumer.Kind) {
		t.Helper()
		if o.Kind != want {
			t.Fatalf("outcome %v (%v), want %v", o.Kind, o.Err, want)
		}
		if o.Err != nil {
			texts = append(texts, o.Err.Error(), o.Reason())
		}
	}
	check(p.next(`{"order_id":"a","sku":"sku-1","qty":1}`, attrs(keys["reused"])), consumer.Processed)
	check(p.next(`{"order_id":"b","sku":"sku-1","qty":2}`, attrs(keys["reused"])), consumer.KeyReuse)
	check(p.next(`not json`, attrs(keys["bad"])), consumer.DeadLettered)
	check(p.next(`{"order_id":"c","sku":"sku-1","qty":1}`, attrs(keys["long"])), consumer.Processed)
	check(p.next(`{"order_id":"c","sku":"sku-1","qty":1}`, attrs(keys["long"])), consumer.Duplicate)
	check(p.next(`{"order_id":"d","sku":"sku-1","qty":1}`, attrs(keys["notutf8"])), consumer.Processed)
	for deadline := time.Now().Add(10 * time.Second); len(p.q.DeadLetters()) < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond) // polling a condition under a deadline
	}
	for _, d := range p.q.DeadLetters() {
		texts = append(texts, d.Reason)
	}
	lines := strings.Split(logs.String(), "\n")
	if len(texts) < 4 || !strings.Contains(logs.String(), "key_hash=") {
		t.Fatalf("%d error texts and no key_hash in the logs: the error paths were not reached\n%s", len(texts), logs.String())
	}
	for name, k := range keys {
		for _, s := range append(texts, lines...) {
			if strings.Contains(s, k) || strings.Contains(s, secret) {
				t.Errorf("the %s key appears in %.200q", name, s)
			}
		}
	}
}
