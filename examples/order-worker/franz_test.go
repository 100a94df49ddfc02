package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/sources/franzsource"
)

// -source franz on an in-process Kafka broker and the memory store: each
// order processed once, its duplicates (new records, same order) answered
// by dedup, and the malformed records dead-lettered.
func TestWorkerOnFranz(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(4, "orders", "orders-dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	addr := cluster.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const unique, dups = 300, 60
	var recs []*kgo.Record
	for i := range unique + dups {
		id := i % unique
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "o-%d", id),
			Value: fmt.Appendf(nil, `{"order_id":"o-%d","sku":"sku-%d","qty":1}`, id, id%100)})
	}
	malformed := []string{`not json`, `{"order_id":"m-1","sku":"sku-1","qty":-3}`}
	for i, body := range malformed {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "bad-%d", i), Value: []byte(body)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	opts, err := parseFlags([]string{"-source", "franz", "-kafka-brokers", addr, "-kafka-session-timeout", "6s",
		"-progress", "1h", "-metrics-addr", "127.0.0.1:0"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	line, _ := runWorker(t, opts, len(recs))
	var s Summary
	if err := json.Unmarshal(line, &s); err != nil {
		t.Fatalf("summary %q: %v", line, err)
	}
	if s.Processed != unique || s.Duplicates != dups || s.DeadLettered != int64(len(malformed)) {
		t.Fatalf("summary %+v: want %d processed, %d duplicates, %d dead-lettered", s, unique, dups, len(malformed))
	}
}

// -kafka-group-protocol picks franz-go's group protocol, and only for
// -source franz: kafka-go has the classic protocol alone.
func TestGroupProtocolFlag(t *testing.T) {
	base := []string{"-kafka-brokers", "127.0.0.1:1", "-metrics-addr", ""}
	for name, want := range map[string]franzsource.Protocol{"consumer": franzsource.ConsumerProtocol, "eager": franzsource.Eager, "cooperative": franzsource.Cooperative} {
		o, err := parseFlags(append([]string{"-source", "franz", "-kafka-group-protocol", name}, base...), &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := groupProtocol(o.kafkaProtocol); got != want {
			t.Errorf("%s: protocol %v, want %v", name, got, want)
		}
	}
	for _, args := range [][]string{
		{"-source", "kafka", "-kafka-group-protocol", "consumer"},
		{"-source", "franz", "-kafka-group-protocol", "next-gen"},
	} {
		if _, err := parseFlags(append(args, base...), &bytes.Buffer{}); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
