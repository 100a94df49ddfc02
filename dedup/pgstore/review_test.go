package pgstore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/outbox"
)

// A Lease of a few entries of a long lane (a destination down for hours
// behind one hot OrderingKey) must not lock, and so write, every Pending
// row of the lane: a row lock writes the row's header, so each relay pass
// would rewrite the whole backlog. It may lock at most the rows it could
// lease (Max per lane).
func TestReviewLeaseOfALongLaneLocksOnlyWhatItMayLease(t *testing.T) {
	p := pool(t)
	table := recordsTable(t, p)
	s := newStore(t, p, table)
	now := time.Now()
	const commits, max = 3, 10
	for c := range commits {
		msgs := make([]outbox.Message, pgstore.MaxOutboxPerCommit)
		for i := range msgs {
			msgs[i] = outbox.Message{Destination: "q", OrderingKey: "hot", Body: []byte("b")}
		}
		sendOnward(t, s, "in-"+strconv.Itoa(c), now, msgs...)
	}
	ctx := testCtx(t)
	es, err := s.Outbox().Lease(ctx, outbox.LeaseRequest{Owner: "r1", Now: now, LeaseUntil: now.Add(time.Minute), Max: max})
	if err != nil || len(es) != max {
		t.Fatalf("Lease: %d entries, %v; want %d", len(es), err, max)
	}
	// xmax is set on a row a committed transaction locked (and left so).
	var locked int
	q := "SELECT count(*) FROM " + pgx.Identifier{pgstore.OutboxTable(table)}.Sanitize() + " WHERE owner = '' AND xmax::text <> '0'"
	if err := p.QueryRow(ctx, q).Scan(&locked); err != nil {
		t.Fatal(err)
	}
	if locked > max {
		t.Errorf("a Lease of %d entries locked %d other rows of the lane, of %d", max, locked, commits*pgstore.MaxOutboxPerCommit-max)
	}
}
