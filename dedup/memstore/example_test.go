package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
)

// One round of the record's state machine, as the consumer drives it: a
// claim takes the key with a lease, Complete commits the response together
// with the handler's Writes, and a later claim of the same key gets the
// COMPLETED record and its response instead of a lease.
func ExampleStore() {
	ctx := context.Background()
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	key, _ := dedup.Key("orders", "order-42")

	c, err := store.Claim(ctx, dedup.ClaimRequest{Key: key, Owner: "worker-1",
		Now: now, LeaseUntil: now.Add(30 * time.Second)})
	if err != nil {
		panic(err)
	}
	fmt.Println("acquired:", c.Acquired, "attempt:", c.Attempt)

	shipped := 0
	err = store.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Response: []byte("shipped"),
		Now: now, ExpiresAt: now.Add(24 * time.Hour),
		Writes: []dedup.Write{memstore.Write{Apply: func() { shipped++ }}}})
	if err != nil {
		panic(err)
	}

	again, err := store.Claim(ctx, dedup.ClaimRequest{Key: key, Owner: "worker-2",
		Now: now.Add(time.Minute), LeaseUntil: now.Add(time.Minute + 30*time.Second)})
	if err != nil {
		panic(err)
	}
	fmt.Println("acquired:", again.Acquired, "existing:", again.Existing.Status, string(again.Existing.Response))
	fmt.Println("shipped:", shipped)

	// The first worker's lease ended with its Complete: it cannot fail the
	// record any more.
	err = store.Fail(ctx, dedup.FailRequest{Lease: c.Lease, Reason: "late", Now: now})
	fmt.Println("late fail:", errors.Is(err, dedup.ErrLeaseLost))
	// Output:
	// acquired: true attempt: 1
	// acquired: false existing: COMPLETED shipped
	// shipped: 1
	// late fail: true
}

// A Write is the in-memory store's business write. Every Check of a commit
// runs before any Apply: one failing Check cancels the whole commit with a
// *dedup.BusinessConditionError: no write is applied, no record
// is written, and the lease is still held.
func ExampleWrite() {
	ctx := context.Background()
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	balance := map[string]int{"alice": 10, "bob": 0}
	transfer := func(from, to string, amount int) []dedup.Write {
		return []dedup.Write{
			memstore.Write{
				Check: func() error {
					if balance[from] < amount {
						return errors.New("insufficient funds")
					}
					return nil
				},
				Apply: func() { balance[from] -= amount },
			},
			memstore.Write{Apply: func() { balance[to] += amount }},
		}
	}

	key, _ := dedup.Key("payments", "transfer-7")
	c, err := store.Claim(ctx, dedup.ClaimRequest{Key: key, Owner: "worker-1",
		Now: now, LeaseUntil: now.Add(30 * time.Second)})
	if err != nil {
		panic(err)
	}
	err = store.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Now: now,
		ExpiresAt: now.Add(time.Hour), Writes: transfer("alice", "bob", 50)})
	var bce *dedup.BusinessConditionError
	if errors.As(err, &bce) {
		fmt.Printf("write %d rejected: %s\n", bce.Index, bce.Message)
	}
	fmt.Println("alice:", balance["alice"], "bob:", balance["bob"])

	// The lease is still held: the consumer now completes the record with
	// the handler's RejectResponse and no writes, so duplicates get it.
	err = store.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Response: []byte("insufficient funds"),
		Now: now, ExpiresAt: now.Add(time.Hour)})
	fmt.Println("completed as rejected:", err == nil)
	// Output:
	// write 0 rejected: insufficient funds
	// alice: 10 bob: 0
	// completed as rejected: true
}
