package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/cmd/onceq/internal/redrive"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
)

// scanCount counts the outbox listing requests a store sends (on
// DynamoDB, each one Scan request of the outbox table).
type scanCount struct{ n atomic.Int64 }

func (c *scanCount) OnStoreCall(_ context.Context, op string, _ time.Duration, _ error) {
	if op == storeinstr.OpOutboxEntries {
		c.n.Add(1)
	}
}

// The outbox redrive over DynamoDB reads the outbox table once a run,
// however many batches it takes: 24 DEAD entries of one message and one
// of another, in pages of the store's own size. Redriving the one message's entry (as the
// console does) passes over the 24 others, and a run over all of them
// moves 24: each run sends one Scan request (the table fits DynamoDB's
// 1 MB page), where listing each batch anew scanned the table per batch.
func TestRedriveOutboxDynamoScansOnce(t *testing.T) {
	table, _ := dynamoWithOutbox(t)
	scans := &scanCount{}
	st, err := dynamostore.New(localAWS(t), dynamostore.WithTable(table), dynamostore.WithHooks(scans))
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outboxOf(st.Capabilities(), "DynamoDB")
	if err != nil {
		t.Fatal(err)
	}
	const n = 24
	many, one := "onceq#scans-many", "onceq#scans-one"
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Destination: "orders-missing", Body: fmt.Appendf(nil, "m%d", i)}
	}
	claimComplete(st)(t, many, msgs)
	claimComplete(st)(t, one, []outbox.Message{{Destination: "orders-missing", Body: []byte("one")}})
	now := time.Now()
	dead := 0
	testenv.Eventually(t, 30*time.Second, "the entries leased and DEAD", func() bool {
		es, err := ob.Lease(t.Context(), outbox.LeaseRequest{Owner: "r", Now: time.Now(), LeaseUntil: now.Add(time.Minute), Max: n + 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if err := ob.Dead(t.Context(), e.Lease, "no such queue", now, now.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			dead++
		}
		return dead == n+1
	})
	run := func(f redrive.Filter) (redrive.Report, int64) {
		t.Helper()
		lot, err := redrive.NewOutbox(ob, "table "+table)
		if err != nil {
			t.Fatal(err)
		}
		before := scans.n.Load()
		rep, err := redrive.Run(t.Context(), lot, st, f, redrive.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return rep, scans.n.Load() - before
	}
	rep, one1 := run(redrive.Filter{KeyHash: dedup.KeyHash(one)})
	if rep.Moved != 1 || rep.Passed != n {
		t.Fatalf("one message's redrive: %s; want 1 moved, %d passed over", rep, n)
	}
	rep, all := run(redrive.Filter{})
	if rep.Moved != n {
		t.Fatalf("the redrive of all: %s; want %d moved", rep, n)
	}
	t.Logf("Scan requests: %d for one message's entry among %d, %d for all %d, in batches of 5", one1, n+1, all, n)
	if one1 != 1 || all != 1 {
		t.Fatalf("Scan requests: %d for one message's entry, %d for all; want the table read once a run", one1, all)
	}
}
