package dynamostore_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
)

// closedFeed is a batch.Feed of the given offsets of partition p, closed
// after the last, as a Lambda event's records are.
type closedFeed struct{ ch chan *broker.Message }

func newClosedFeed(p batch.Partition, offs ...int64) *closedFeed {
	f := &closedFeed{ch: make(chan *broker.Message, len(offs))}
	for _, off := range offs {
		f.ch <- &broker.Message{ID: fmt.Sprintf("%s/%d/%d", p.Topic, p.Partition, off), Body: []byte(fmt.Sprint(off)),
			Origin: broker.Origin{System: "kafka", Destination: p.Topic, Partition: p.Partition, Offset: off}}
	}
	close(f.ch)
	return f
}

func (f *closedFeed) Records() <-chan *broker.Message                           { return f.ch }
func (f *closedFeed) DeadLetter(context.Context, *broker.Message, string) error { return nil }
func (f *closedFeed) CommitGroup(context.Context, int64) error                  { return nil }

// runBounded runs r over f for l, and fails the test when Run has not
// returned within d.
func runBounded(t *testing.T, r *batch.Runner, l batch.Lease, f batch.Feed, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	err := r.Run(ctx, l, f)
	if ctx.Err() != nil {
		t.Fatalf("Run had not returned after %v: %v", d, err)
	}
	return err
}

// A feed that gives a record again (its offsets go back) within one
// batch: each record's writes commit once.
func TestReviewBatchOffsetsGoingBack(t *testing.T) {
	st, client, _ := countedStore(t)
	inv := newInventory(t, client)
	inv.stock(t, "total", 100)
	bs := st.Offsets()
	p, l := acquired(t, bs, 0)
	// One write for the batch: the count of its records.
	h := batch.HandlerFunc(func(_ context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
		return []dedup.Write{inv.reserve("total", len(msgs))}, nil
	})
	r, err := batch.NewRunner(bs, h, batch.MaxRecords(100), batch.Window(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := runBounded(t, r, l, newClosedFeed(p, 10, 11, 12, 11, 12, 13), 20*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, reserved := inv.levels(t, "total"); reserved != 4 {
		t.Fatalf("the writes of %d records committed for the 4 records 10 to 13", reserved)
	}
}

// Two records of one batch whose writes touch one item (two orders of
// one SKU): DynamoDB refuses a transaction with two operations on one
// item. The partition must not stall on it: the batch is split (or its
// records isolated) and both records' writes commit.
func TestReviewBatchTwoWritesToOneItem(t *testing.T) {
	st, client, _ := countedStore(t)
	inv := newInventory(t, client)
	inv.stock(t, "sku-1", 100)
	bs := st.Offsets()
	p, l := acquired(t, bs, 0)
	h := batch.HandlerFunc(func(_ context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
		ws := make([]dedup.Write, len(msgs))
		for i := range msgs {
			ws[i] = inv.reserve("sku-1", 1)
		}
		return ws, nil
	})
	r, err := batch.NewRunner(bs, h, batch.MaxRecords(100), batch.Window(time.Hour), batch.RetryDelay(10*time.Millisecond), batch.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	if err != nil {
		t.Fatal(err)
	}
	err = runBounded(t, r, l, newClosedFeed(p, 0, 1), 5*time.Second)
	row, _ := bs.Offset(t.Context(), p)
	if _, reserved := inv.levels(t, "sku-1"); reserved != 2 || row.Next != 2 {
		t.Fatalf("Run: %v; %d reserved, stored next %d; want both records' writes and next 2", err, reserved, row.Next)
	}
}
