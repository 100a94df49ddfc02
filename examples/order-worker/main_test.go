package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestDemoSummary(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"-demo", "2000", "-progress", "1h", "-metrics-addr", ""}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var s Summary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("summary %q: %v", out.String(), err)
	}
	// 2000 deliveries: 4 malformed, then of 1996 every fifth a duplicate.
	const deliveries, malformed = 2000, 4
	dups := int64((deliveries - malformed) / 5)
	unique := int64(deliveries-malformed) - dups
	if s.DeadLettered != malformed || s.Duplicates != dups || s.Rejected != 10 || s.Processed != unique-10 || !strings.Contains(errOut.String(), "over "+strconv.FormatInt(s.Processed, 10)+" orders") {
		t.Fatalf("summary %+v; want %d dead-lettered, %d duplicates, 10 rejected, %d processed", s, malformed, dups, unique-10)
	}
}

func TestEnvironmentSetsFlags(t *testing.T) {
	t.Setenv("ORDER_WORKER_CONCURRENCY", "3")
	o, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil || o.concurrency != 3 {
		t.Fatalf("concurrency %d, %v", o.concurrency, err)
	}
	o, _ = parseFlags([]string{"-concurrency", "5"}, &bytes.Buffer{})
	if o.concurrency != 5 {
		t.Fatal("a command-line flag did not win over the environment")
	}
	t.Setenv("ORDER_WORKER_DEMO", "many")
	if _, err := parseFlags(nil, &bytes.Buffer{}); err == nil {
		t.Fatal("a bad environment value was accepted")
	}
}

func TestParseOrder(t *testing.T) {
	for _, body := range []string{``, `not json`, `{"order_id":"o","sku":"s","qty":0}`, `{"order_id":"o","sku":"s","qty":-1}`,
		`{"sku":"s","qty":1}`, `{"order_id":"o","qty":1}`, `{"order_id":"o","sku":"s","qty":1} {}`, `{"order_id":"o","sku":"s","qty":"2"}`} {
		if _, err := parseOrder([]byte(body)); !errors.Is(err, ErrMalformedOrder) {
			t.Errorf("%q: %v, want ErrMalformedOrder", body, err)
		}
	}
	o, err := parseOrder([]byte(`{"order_id":"o-1","sku":"sku-1","qty":2,"note":"unknown fields are fine"}`))
	if err != nil || o.Qty != 2 {
		t.Fatalf("%+v %v", o, err)
	}
}

func FuzzParseOrder(f *testing.F) {
	for _, s := range []string{`{"order_id":"o-1","sku":"sku-1","qty":2}`, `not json`, ``, `{"qty":-1}`, `{"order_id":"o","sku":"s","qty":1e30}`, "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		o, err := parseOrder(body)
		if err != nil {
			if !errors.Is(err, ErrMalformedOrder) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if o.OrderID == "" || o.SKU == "" || o.Qty <= 0 {
			t.Fatalf("accepted an invalid order %+v", o)
		}
	})
}

func TestSourceFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-source", "nats"},
		{"-source", "sqs"},
		{"-source", "kafka", "-kafka-brokers", " , "},
		{"-source", "kafka", "-kafka-group", ""},
		{"-source", "kafka", "-demo", "10"},
	} {
		if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	o, err := parseFlags([]string{"-source", "kafka", "-kafka-brokers", "a:9092, b:9092", "-kafka-topic", "orders-eu"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if b := o.brokers(); len(b) != 2 || b[1] != "b:9092" || o.kafkaDLQTopic != "orders-eu-dlq" || o.kafkaGroup != "order-worker" {
		t.Fatalf("brokers %q, dead-letter topic %q, group %q", b, o.kafkaDLQTopic, o.kafkaGroup)
	}
}
