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
	// The second stage: every reserved order shipped once, through the
	// outbox; duplicate and rejected orders sent nothing onward.
	if s.Shipped != s.Processed || !strings.Contains(errOut.String(), "at most 1 shipment per order") {
		t.Fatalf("shipped %d of %d reserved orders; stderr %s", s.Shipped, s.Processed, errOut.String())
	}
}

func TestEnvironmentSetsFlags(t *testing.T) {
	t.Setenv("ORDER_WORKER_CONCURRENCY", "3")
	o, err := parseFlags([]string{"-demo", "1"}, &bytes.Buffer{})
	if err != nil || o.concurrency != 3 {
		t.Fatalf("concurrency %d, %v", o.concurrency, err)
	}
	o, _ = parseFlags([]string{"-demo", "1", "-concurrency", "5"}, &bytes.Buffer{})
	if o.concurrency != 5 {
		t.Fatal("a command-line flag did not win over the environment")
	}
	t.Setenv("ORDER_WORKER_DEMO", "many")
	if _, err := parseFlags(nil, &bytes.Buffer{}); err == nil {
		t.Fatal("a bad environment value was accepted")
	}
}

// Every bad flag or argument is exit 2 and one line on stderr: no panic,
// no list of every flag, no worker idling forever.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string // ORDER_WORKER_DEMO, when set
		want string
	}{
		{[]string{"-demo", "10", "-progress", "-1s"}, "", "-progress"},
		{[]string{"-demo", "-5"}, "", "-demo -5"},
		{[]string{"-demo", "10", "stray"}, "", `unexpected argument "stray"`},
		{[]string{"-demo", "10", "-concurrency", "-1"}, "", "Concurrency -1"},
		{[]string{"-demo", "10", "-concurrency", "0"}, "", "Concurrency 0"},
		{[]string{"-demo", "10", "-lease-ttl", "0"}, "", "LeaseTTL"},
		{[]string{"-demo", "10", "-lease-ttl", "31s"}, "", "LeaseTTL"},
		{nil, "", "memory source has no producer"},
		{[]string{"-source", "memory"}, "", "memory source has no producer"},
		{[]string{"-bogus"}, "", "flag provided but not defined: -bogus"},
		{[]string{"-demo", "many"}, "", `invalid value "many" for flag -demo`},
		{[]string{"-source", "nats"}, "", `-source "nats"`},
		{[]string{"-source", "sqs"}, "", "needs -sqs-queue-url"},
		{[]string{"-source", "kafka", "-demo", "10"}, "", "memory source only"},
		{nil, "many", "ORDER_WORKER_DEMO"},
	} {
		t.Run(strings.Join(c.args, " ")+"|"+c.env, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("ORDER_WORKER_DEMO", c.env)
			}
			var out, errOut bytes.Buffer
			code := run(c.args, &out, &errOut)
			lines := strings.Split(strings.TrimSuffix(errOut.String(), "\n"), "\n")
			if code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "order-worker: ") || !strings.Contains(lines[0], c.want) || out.Len() != 0 {
				t.Fatalf("exit %d, stderr %q, stdout %q; want exit 2 and one line containing %q", code, errOut.String(), out.String(), c.want)
			}
		})
	}
}

// -h lists the flags and is not an error.
func TestHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"-h"}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "-progress") || !strings.Contains(errOut.String(), "no progress lines") {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
}

// -progress 0 runs with no progress lines (it used to panic in NewTicker).
func TestProgressOff(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"-demo", "200", "-progress", "0", "-metrics-addr", ""}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if strings.Contains(errOut.String(), "msg/s") || !strings.Contains(out.String(), `"processed"`) {
		t.Fatalf("stderr %q, stdout %q; want a summary and no progress line", errOut.String(), out.String())
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
