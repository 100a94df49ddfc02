package batch_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/metrictest"
	"github.com/onceq/onceq/retry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var part = batch.Partition{Group: "g", Topic: "orders", Partition: 3}

// feed is a batch.Feed over a channel, recording dead letters and group
// commits.
type feed struct {
	ch     chan *broker.Message
	mu     sync.Mutex
	dead   []int64
	group  []int64
	dlqErr error
	// groupFails fails that many group commits.
	groupFails int
}

func newFeed() *feed { return &feed{ch: make(chan *broker.Message, 1000)} }

func (f *feed) Records() <-chan *broker.Message { return f.ch }

func (f *feed) DeadLetter(_ context.Context, m *broker.Message, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dlqErr != nil {
		return f.dlqErr
	}
	f.dead = append(f.dead, m.Origin.Offset)
	return nil
}

func (f *feed) CommitGroup(_ context.Context, next int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.groupFails > 0 {
		f.groupFails--
		return errors.New("rebalance in progress")
	}
	f.group = append(f.group, next)
	return nil
}

func (f *feed) send(from, to int64) {
	for off := from; off < to; off++ {
		f.ch <- record(off, fmt.Sprintf("v%d", off))
	}
}

func (f *feed) groups() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.group)
}

func (f *feed) deadLetters() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.dead)
}

func record(off int64, value string) *broker.Message {
	return &broker.Message{ID: fmt.Sprintf("orders/3/%d", off), Body: []byte(value),
		Origin: broker.Origin{System: "kafka", Destination: "orders", Partition: 3, Offset: off}}
}

// offsetWrite is the test store's business write: a record's offset.
type offsetWrite int64

func (offsetWrite) WriteKind() dedup.WriteKind { return "batchtest" }

// offsets is a handler that writes each record's offset.
func offsets(_ context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
	out := make([]dedup.Write, len(msgs))
	for i, m := range msgs {
		out[i] = offsetWrite(m.Origin.Offset)
	}
	return out, nil
}

// running runs r over f for lease until stop is called, which returns
// Run's error.
func running(t *testing.T, r *batch.Runner, lease batch.Lease, f batch.Feed) (stop func() error) {
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx, lease, f) }()
	return func() error {
		cancel()
		return <-errc
	}
}

func newRunner(t *testing.T, s batch.Store, h batch.HandlerFunc, opts ...batch.Option) *batch.Runner {
	t.Helper()
	r, err := batch.NewRunner(s, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func acquire(t *testing.T, r *batch.Runner, member string) batch.Lease {
	t.Helper()
	l, err := r.Acquire(t.Context(), part, member)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func wantWrites(t *testing.T, s *rowStore, from, to int64, skip ...int64) {
	t.Helper()
	var want []dedup.Write
	for off := from; off < to; off++ {
		if !slices.Contains(skip, off) {
			want = append(want, offsetWrite(off))
		}
	}
	if got := s.written(); !slices.Equal(got, want) {
		t.Fatalf("writes %v, want %v", got, want)
	}
}

func wantNext(t *testing.T, s *rowStore, next int64) {
	t.Helper()
	l, err := s.Offset(t.Context(), part)
	if err != nil || l.Next != next {
		t.Fatalf("stored next %d (%v), want %d", l.Next, err, next)
	}
}

// A batch is handled at MaxRecords, or Window after its first record; its
// writes commit with the partition's next offset, then the group's
// offset follows.
func TestBatchesCommitWithTheirOffset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRowStore()
		r := newRunner(t, s, offsets, batch.MaxRecords(4), batch.Window(time.Second))
		f := newFeed()
		stop := running(t, r, acquire(t, r, "m1"), f)
		f.send(0, 10)
		synctest.Wait()
		if n := len(s.committed()); n != 2 {
			t.Fatalf("%d commits before the window ended, want the 2 full batches", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if err := stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v, want context.Canceled", err)
		}
		wantWrites(t, s, 0, 10)
		wantNext(t, s, 10)
		var froms []int64
		for _, c := range s.committed() {
			froms = append(froms, c.From)
		}
		if !slices.Equal(froms, []int64{0, 4, 8}) {
			t.Fatalf("commits from %v, want 0 (the first record's, no row yet), 4, 8", froms)
		}
		if !slices.Equal(f.group, []int64{4, 8, 10}) {
			t.Fatalf("group commits %v, want 4, 8, 10", f.group)
		}
	})
}

// Records below the stored next offset (a refetch) are not handled again.
func TestRecordsBelowTheStoredOffsetSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRowStore()
		r := newRunner(t, s, offsets, batch.MaxRecords(5))
		l := acquire(t, r, "m1")
		if err := s.Commit(t.Context(), batch.Commit{Lease: l, From: 0, Next: 5}); err != nil {
			t.Fatal(err)
		}
		l = acquire(t, r, "m2")
		if l.Next != 5 {
			t.Fatalf("Acquire: Next %d, want the stored 5", l.Next)
		}
		f := newFeed()
		stop := running(t, r, l, f)
		f.send(3, 10)
		synctest.Wait()
		_ = stop()
		wantWrites(t, s, 5, 10)
		wantNext(t, s, 10)
	})
}

// A commit the Store refuses as too large is split at record boundaries,
// each part committing its own offset.
func TestTooLargeSplit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRowStore()
		s.maxItems = 3 // two records' writes and the offset row
		r := newRunner(t, s, offsets, batch.MaxRecords(8))
		f := newFeed()
		stop := running(t, r, acquire(t, r, "m1"), f)
		f.send(0, 8)
		synctest.Wait()
		_ = stop()
		wantWrites(t, s, 0, 8)
		wantNext(t, s, 8)
		if n := len(s.committed()); n != 4 {
			t.Fatalf("%d commits, want 4 parts of 2", n)
		}
	})
}

// A record that fails is isolated: the records around it commit, it is
// tried MaxAttempts times alone, then dead-lettered and its offset
// committed.
func TestFailingRecordIsolatedAndDeadLettered(t *testing.T) {
	for _, named := range []bool{false, true} {
		t.Run(fmt.Sprintf("named=%v", named), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newRowStore()
				alone := 0
				h := func(ctx context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
					for i, m := range msgs {
						if m.Origin.Offset == 5 {
							if len(msgs) == 1 {
								alone++
							}
							if named {
								return nil, &batch.RecordError{Index: i, Err: errors.New("bad order")}
							}
							return nil, errors.New("bad order")
						}
					}
					return offsets(ctx, msgs)
				}
				r := newRunner(t, s, h, batch.MaxRecords(8), batch.MaxAttempts(3), batch.RetryDelay(time.Second))
				f := newFeed()
				stop := running(t, r, acquire(t, r, "m1"), f)
				f.send(0, 8)
				synctest.Wait()
				if got := f.deadLetters(); len(got) != 0 {
					t.Fatalf("dead-lettered %v before its retries", got)
				}
				time.Sleep(time.Minute)
				synctest.Wait()
				_ = stop()
				if got := f.deadLetters(); !slices.Equal(got, []int64{5}) {
					t.Fatalf("dead letters %v, want offset 5", got)
				}
				if alone != 3 {
					t.Fatalf("the failing record ran alone %d times, want MaxAttempts 3", alone)
				}
				wantWrites(t, s, 0, 8, 5)
				wantNext(t, s, 8)
			})
		})
	}
}

// A dead letter that cannot be produced holds the partition: the record
// is not skipped.
func TestDeadLetterFailureHoldsThePartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRowStore()
		h := func(ctx context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
			if len(msgs) == 1 && msgs[0].Origin.Offset == 1 {
				return nil, errors.New("bad order")
			}
			if slices.ContainsFunc(msgs, func(m *broker.Message) bool { return m.Origin.Offset == 1 }) {
				return nil, errors.New("bad order")
			}
			return offsets(ctx, msgs)
		}
		r := newRunner(t, s, h, batch.MaxRecords(3), batch.MaxAttempts(1))
		f := newFeed()
		f.dlqErr = errors.New("no dead-letter topic")
		stop := running(t, r, acquire(t, r, "m1"), f)
		f.send(0, 3)
		time.Sleep(time.Hour)
		synctest.Wait()
		_ = stop()
		wantWrites(t, s, 0, 1)
		wantNext(t, s, 1)
	})
}

// A member whose partition was taken by another cannot commit: Run stops
// with ErrFenced and nothing of its batch is written.
func TestZombieFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRowStore()
		r := newRunner(t, s, offsets, batch.MaxRecords(2))
		zombie := acquire(t, r, "m1")
		acquire(t, r, "m2") // the partition moved
		f := newFeed()
		ctx := t.Context()
		f.send(0, 2)
		err := r.Run(ctx, zombie, f)
		if !errors.Is(err, batch.ErrFenced) {
			t.Fatalf("Run: %v, want ErrFenced", err)
		}
		if w := s.written(); len(w) != 0 {
			t.Fatalf("a fenced member wrote %v", w)
		}
		if len(f.group) != 0 {
			t.Fatalf("a fenced member committed group offsets %v", f.group)
		}
	})
}

// A Store failure other than a refusal is retried until the batch
// commits.
func TestTransientCommitFailureRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRowStore()
		s.failNext = 2
		r := newRunner(t, s, offsets, batch.MaxRecords(4))
		f := newFeed()
		stop := running(t, r, acquire(t, r, "m1"), f)
		f.send(0, 4)
		time.Sleep(time.Minute)
		synctest.Wait()
		_ = stop()
		wantWrites(t, s, 0, 4)
		wantNext(t, s, 4)
	})
}

// With DedupKeys, a record whose key a committed batch completed, or an
// earlier record of its own batch holds, is dropped; the rest commit.
// Without it, both run.
func TestDedupKeys(t *testing.T) {
	keyed := func(off int64, key string) *broker.Message {
		m := record(off, "v")
		m.Attributes = map[string]string{broker.IdempotencyKeyAttribute: key}
		return m
	}
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("on=%v", on), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newRowStore()
				var opts []batch.Option
				if on {
					opts = append(opts, batch.DedupKeys("orders"))
				}
				r := newRunner(t, s, offsets, append(opts, batch.MaxRecords(3))...)
				f := newFeed()
				stop := running(t, r, acquire(t, r, "m1"), f)
				for i, k := range []string{"a", "b", "a", "c", "b", "d"} {
					f.ch <- keyed(int64(i), k)
				}
				synctest.Wait()
				_ = stop()
				if on {
					wantWrites(t, s, 0, 6, 2, 4)
				} else {
					wantWrites(t, s, 0, 6)
				}
				wantNext(t, s, 6)
			})
		})
	}
}

// The Runner reports batch sizes, commit latency, the stored offset
// against the group's, and dead letters.
func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader, mp := metrictest.Provider(t)
		s := newRowStore()
		h := func(ctx context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
			if len(msgs) == 1 && msgs[0].Origin.Offset == 4 {
				return nil, errors.New("bad")
			}
			return offsets(ctx, msgs)
		}
		r := newRunner(t, s, h, batch.MaxRecords(4), batch.MaxAttempts(1), batch.WithMeterProvider(mp))
		f := newFeed()
		stop := running(t, r, acquire(t, r, "m1"), f)
		f.send(0, 5)
		time.Sleep(time.Second)
		synctest.Wait()
		_ = stop()
		if n, sum := metrictest.Histogram(t, reader, "onceq.batch.records"); n != 2 || sum != 4 {
			t.Fatalf("onceq.batch.records: %d batches of %v records, want 2 of 4 (a full batch, a dead letter's offset)", n, sum)
		}
		if n, _ := metrictest.Histogram(t, reader, "onceq.batch.commit.duration"); n != 2 {
			t.Fatalf("onceq.batch.commit.duration: %d, want 2", n)
		}
		if lag, ok := metrictest.Gauge(t, reader, "onceq.batch.group_lag"); !ok || lag != 0 {
			t.Fatalf("onceq.batch.group_lag = %v (%v), want 0", lag, ok)
		}
		if n := metrictest.Counter(t, reader, "onceq.batch.dead_letters"); n != 1 {
			t.Fatalf("onceq.batch.dead_letters = %d, want 1", n)
		}
	})
}

// NewRunner refuses a bad configuration with ErrInvalidConfig.
func TestInvalidConfig(t *testing.T) {
	for _, opt := range []batch.Option{batch.MaxRecords(0), batch.Window(0), batch.MaxAttempts(0),
		batch.RetryDelay(-1), batch.Retention(0)} {
		if _, err := batch.NewRunner(newRowStore(), batch.HandlerFunc(offsets), opt); !errors.Is(err, batch.ErrInvalidConfig) {
			t.Fatalf("NewRunner: %v, want ErrInvalidConfig", err)
		}
	}
	if _, err := batch.NewRunner(nil, batch.HandlerFunc(offsets)); !errors.Is(err, batch.ErrInvalidConfig) {
		t.Fatalf("NewRunner with no Store: %v", err)
	}
}

// A batch whose handler finished after Run's ctx ended (its partition
// being revoked) still reaches the Store, whose token decides: committed
// when the partition did not move, refused with ErrFenced when a paused
// member wakes after it moved.
func TestBatchFinishingAfterRevokeReachesTheStore(t *testing.T) {
	for _, moved := range []bool{false, true} {
		t.Run(fmt.Sprintf("moved=%v", moved), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newRowStore()
				started, wake := make(chan struct{}), make(chan struct{})
				h := func(ctx context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
					close(started)
					<-wake // paused: it does not see ctx end
					return offsets(ctx, msgs)
				}
				r := newRunner(t, s, h, batch.MaxRecords(2))
				f := newFeed()
				ctx, cancel := context.WithCancel(t.Context())
				errc := make(chan error, 1)
				lease := acquire(t, r, "m1")
				go func() { errc <- r.Run(ctx, lease, f) }()
				f.send(0, 2)
				<-started
				cancel()
				if moved {
					acquire(t, r, "m2")
				}
				close(wake)
				err := <-errc
				if moved {
					if !errors.Is(err, batch.ErrFenced) {
						t.Fatalf("Run: %v, want ErrFenced", err)
					}
					if w := s.written(); len(w) != 0 {
						t.Fatalf("the zombie wrote %v", w)
					}
					return
				}
				wantWrites(t, s, 0, 2)
				wantNext(t, s, 2)
			})
		})
	}
}

// A record that fails with a Permanent error is dead-lettered at once,
// with no retry.
func TestPermanentFailureDeadLetteredAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRowStore()
		runs := 0
		h := func(ctx context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
			for i, m := range msgs {
				if m.Origin.Offset == 1 {
					if len(msgs) == 1 {
						runs++
					}
					return nil, &batch.RecordError{Index: i, Err: retry.WithClass(errors.New("malformed"), retry.Permanent)}
				}
			}
			return offsets(ctx, msgs)
		}
		r := newRunner(t, s, h, batch.MaxRecords(3), batch.MaxAttempts(5))
		f := newFeed()
		stop := running(t, r, acquire(t, r, "m1"), f)
		f.send(0, 3)
		synctest.Wait()
		_ = stop()
		if runs != 1 || !slices.Equal(f.deadLetters(), []int64{1}) {
			t.Fatalf("ran alone %d times, dead letters %v; want once, offset 1", runs, f.deadLetters())
		}
		wantWrites(t, s, 0, 3, 1)
	})
}

// KeyFunc's key replaces the Kafka default: two records of one business
// key, with different values, are one.
func TestKeyFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRowStore()
		byValue := func(m *broker.Message) (string, error) { return string(m.Body[:1]), nil }
		r := newRunner(t, s, offsets, batch.DedupKeys("orders"), batch.KeyFunc(byValue), batch.MaxRecords(3))
		f := newFeed()
		stop := running(t, r, acquire(t, r, "m1"), f)
		for i, v := range []string{"a1", "a2", "b1"} {
			f.ch <- record(int64(i), v)
		}
		synctest.Wait()
		_ = stop()
		wantWrites(t, s, 0, 3, 1)
	})
}

// A commit that landed but whose answer was lost is found committed when
// its retry meets the moved offset: the partition goes on.
func TestCommitWithLostAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRowStore()
		s.loseAnswer = true
		r := newRunner(t, s, offsets, batch.MaxRecords(2))
		f := newFeed()
		stop := running(t, r, acquire(t, r, "m1"), f)
		f.send(0, 4)
		time.Sleep(time.Minute)
		synctest.Wait()
		if err := stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v, want it running until cancelled", err)
		}
		wantWrites(t, s, 0, 4)
		wantNext(t, s, 4)
	})
}

// A record whose writes a condition refuses is dead-lettered at once, as
// a per-message handler's rejected write stays rejected; its neighbours
// commit.
func TestRefusedWritesDeadLetteredAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstoretest.New(t)
		var mu sync.Mutex
		var applied []int64
		h := func(_ context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
			var ws []dedup.Write
			for _, m := range msgs {
				off := m.Origin.Offset
				ws = append(ws, memstore.Write{
					Check: func() error {
						if off == 2 {
							return errors.New("out of stock")
						}
						return nil
					},
					Apply: func() { mu.Lock(); applied = append(applied, off); mu.Unlock() },
				})
			}
			return ws, nil
		}
		r := newRunner(t, store.Offsets(), h, batch.MaxRecords(4))
		f := newFeed()
		l, err := r.Acquire(t.Context(), part, "m1")
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, r, l, f)
		f.send(0, 4)
		synctest.Wait()
		_ = stop()
		if !slices.Equal(f.deadLetters(), []int64{2}) || !slices.Equal(applied, []int64{0, 1, 3}) {
			t.Fatalf("dead letters %v, applied %v; want 2 dead-lettered at once, 0, 1, 3 applied", f.deadLetters(), applied)
		}
	})
}

// A feed whose records close ends Run once the records taken committed,
// however few: a Lambda event's records are all there is.
func TestClosedFeedFlushes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRowStore()
		r := newRunner(t, s, offsets, batch.MaxRecords(4), batch.Window(time.Hour))
		f := newFeed()
		f.send(0, 6)
		close(f.ch)
		if err := r.Run(t.Context(), acquire(t, r, "m1"), f); err != nil {
			t.Fatalf("Run: %v", err)
		}
		wantWrites(t, s, 0, 6)
		wantNext(t, s, 6)
	})
}

// The group's offset follows the stored one even when a group commit
// fails and no batch follows (it is tried again), and a partition whose
// earlier owner left the group's offset behind has it caught up at once.
func TestGroupOffsetCatchesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRowStore()
		r := newRunner(t, s, offsets, batch.MaxRecords(4))
		f := newFeed()
		f.groupFails = 2
		stop := running(t, r, acquire(t, r, "m1"), f)
		f.send(0, 4)
		synctest.Wait()
		if g := f.groups(); len(g) != 0 {
			t.Fatalf("group commits %v while they fail", g)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		_ = stop()
		if !slices.Equal(f.group, []int64{4}) {
			t.Fatalf("group commits %v, want 4 once its retry got through", f.group)
		}

		f2 := newFeed()
		stop = running(t, r, acquire(t, r, "m2"), f2)
		synctest.Wait()
		_ = stop()
		if !slices.Equal(f2.group, []int64{4}) {
			t.Fatalf("the next owner's group commits %v, want the stored 4 at once", f2.group)
		}
	})
}
