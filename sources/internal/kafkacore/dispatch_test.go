package kafkacore

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/sources/kafkagroup"
)

type lateCount struct{ n atomic.Int64 }

func (l *lateCount) OnKafkaLateAck(context.Context, string, int32, int64, int32) { l.n.Add(1) }

func newTestDispatcher(t *testing.T, parts int) (*Dispatcher[int64, struct{}], []*Partition[int64, struct{}], *lateCount) {
	t.Helper()
	d := &Dispatcher[int64, struct{}]{}
	d.Init()
	d.ToMessage = func(m *broker.Message, r int64, attempt int) {
		*m = broker.Message{ID: strconv.FormatInt(r, 10), Deliveries: attempt}
	}
	tel, err := NewTelemetry(noop.NewMeterProvider(), "test", "g", []string{"t"}, "", d)
	if err != nil {
		t.Fatal(err)
	}
	late := &lateCount{}
	d.Tel, d.Logger, d.Hooks.LateAck = tel, slog.New(slog.DiscardHandler), []kafkagroup.HookKafkaLateAck{late}
	ps := make([]*Partition[int64, struct{}], parts)
	for i := range ps {
		ps[i] = NewPartition[int64, struct{}]("t", int32(i), 1, -1, tel)
	}
	d.Add(ps...)
	return d, ps, late
}

func enqueueAll(t *testing.T, d *Dispatcher[int64, struct{}], p *Partition[int64, struct{}], n int) {
	t.Helper()
	p.Lock()
	defer p.Unlock()
	for off := range int64(n) {
		if !d.EnqueueLocked(p, off, off, 100, time.Now()) {
			t.Fatalf("enqueue %d refused", off)
		}
	}
}

// TestConcurrentSettles: eight workers receive and settle the records of
// four partitions at once (a first delivery of every seventh record is
// nacked and comes back), while two of the partitions are revoked midway.
// Every record of the kept partitions is acked exactly once and committed,
// a record is never acked twice while its partition is live, settles after
// the release are dropped as late, and the bytes held return to zero.
// Run under -race, it also checks the per-partition locking.
func TestConcurrentSettles(t *testing.T) {
	const parts, per, workers = 4, 3000, 8
	d, ps, late := newTestDispatcher(t, parts)
	for _, p := range ps {
		enqueueAll(t, d, p, per)
	}
	var acked [parts][per]atomic.Int32 // acks answered as live
	var total atomic.Int64
	busy := make(chan struct{}) // closed once the workers have settled per records
	var busyOnce sync.Once
	settled := make(chan struct{}, 1) // a record was done
	d.OnDone = func(*Partition[int64, struct{}], int) {
		select {
		case settled <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				ms, err := d.Receive(ctx, 16)
				if err != nil {
					return
				}
				for _, m := range ms {
					dl := m.Handle.(*Delivery[int64, struct{}])
					if m.Deliveries == 1 && dl.e.off%7 == 0 {
						if err := d.Nack(ctx, m, 0); err != nil {
							t.Errorf("nack: %v", err)
						}
						continue
					}
					before := late.n.Load()
					if err := d.Ack(ctx, m); err != nil {
						t.Errorf("ack: %v", err)
					}
					if late.n.Load() == before || dl.e.p.ID < 2 {
						acked[dl.e.p.ID][dl.e.off].Add(1)
					}
					if total.Add(1) >= per {
						busyOnce.Do(func() { close(busy) })
					}
				}
			}
		})
	}
	<-busy // revoke once the workers are busy
	revoked := ps[2:]
	d.Stop(revoked)
	d.Drain(revoked, 100*time.Millisecond, nil)
	d.Release(revoked)
	timeout := time.After(30 * time.Second)
	for !allDone(ps[:2], per) {
		select {
		case <-settled:
		case <-timeout:
			t.Fatal("the kept partitions were not all acked")
		}
	}
	cancel()
	wg.Wait()
	for i := range 2 {
		for off := range per {
			if n := acked[i][off].Load(); n != 1 {
				t.Fatalf("partition %d offset %d acked %d times, want 1", i, off, n)
			}
		}
	}
	for i := 2; i < parts; i++ {
		for off := range per {
			if n := acked[i][off].Load(); n > 1 {
				t.Fatalf("revoked partition %d offset %d acked %d times while live", i, off, n)
			}
		}
	}
	if b := d.Bytes(); b != 0 {
		t.Fatalf("bytes held %d after every kept record was acked, want 0", b)
	}
	if n := len(d.Partitions()); n != 2 {
		t.Fatalf("%d partitions dispatched, want the 2 kept", n)
	}
}

func allDone(ps []*Partition[int64, struct{}], per int) bool {
	for _, p := range ps {
		p.Lock()
		off, _ := p.Tr.ToCommit()
		p.Unlock()
		if off != int64(per) {
			return false
		}
	}
	return true
}

// A dead letter of a partition released before the call is dropped as a
// late ack is: nothing produced, no error, so the consumer neither keeps it
// as a dead letter no destination took nor counts it sent; the partition's
// new owner reads the message again and dead-letters it there.
func TestDeadLetterAfterReleaseDropped(t *testing.T) {
	d, ps, late := newTestDispatcher(t, 1)
	produced := 0
	d.Produce = func(context.Context, int64, string, string, int32, int64) error {
		produced++
		return nil
	}
	enqueueAll(t, d, ps[0], 1)
	ms, err := d.Receive(t.Context(), 1)
	if err != nil || len(ms) != 1 {
		t.Fatalf("receive: %d messages, %v", len(ms), err)
	}
	d.Stop(ps)
	d.Drain(ps, 0, nil)
	d.Release(ps)
	if err := d.DeadLetter(t.Context(), ms[0], "malformed"); err != nil {
		t.Fatalf("dead letter after the release: %v, want nil (dropped as late)", err)
	}
	if produced != 0 || late.n.Load() != 1 {
		t.Fatalf("produced %d copies and counted %d late settles, want 0 and 1", produced, late.n.Load())
	}
}

// A Receive whose context is over takes none of the queued messages: its
// caller could not settle them, and they would wait for a revoke.
func TestReceiveAfterContextTakesNothing(t *testing.T) {
	d, ps, _ := newTestDispatcher(t, 1)
	enqueueAll(t, d, ps[0], 3)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if ms, err := d.Receive(ctx, 3); len(ms) != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive with its context over: %d messages, %v; want none and context.Canceled", len(ms), err)
	}
	if ms, err := d.Receive(t.Context(), 3); err != nil || len(ms) != 3 {
		t.Fatalf("Receive after: %d messages, %v; want the 3 queued", len(ms), err)
	}
}

// TestAckTakesOnlyItsPartition: while one partition's lock is held (a
// fetch enqueueing, a commit reading its tracker, a settle), the messages
// of the others are still acked.
func TestAckTakesOnlyItsPartition(t *testing.T) {
	d, ps, _ := newTestDispatcher(t, 2)
	enqueueAll(t, d, ps[1], 10)
	ms, err := d.Receive(t.Context(), 10)
	if err != nil || len(ms) != 10 {
		t.Fatalf("Receive: %d, %v", len(ms), err)
	}
	ps[0].Lock()
	defer ps[0].Unlock()
	done := make(chan error, 1)
	go func() {
		var err error
		for _, m := range ms {
			err = errors.Join(err, d.Ack(t.Context(), m))
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("acks on partition 1 waited for partition 0's lock")
	}
}

// TestSecondAckNotInFlight: a message acked twice is refused the second
// time; one acked after its partition's release is dropped as late.
func TestSecondAckNotInFlight(t *testing.T) {
	d, ps, late := newTestDispatcher(t, 1)
	enqueueAll(t, d, ps[0], 2)
	ms, err := d.Receive(t.Context(), 2)
	if err != nil || len(ms) != 2 {
		t.Fatalf("Receive: %d, %v", len(ms), err)
	}
	if err := d.Ack(t.Context(), ms[0]); err != nil {
		t.Fatal(err)
	}
	if err := d.Ack(t.Context(), ms[0]); !errors.Is(err, kafkagroup.ErrNotInFlight) {
		t.Fatalf("second ack: %v, want not in flight", err)
	}
	d.Stop(ps)
	if n := d.Release(ps); n != 1 {
		t.Fatalf("released with %d in flight, want 1", n)
	}
	if err := d.Ack(t.Context(), ms[1]); err != nil || late.n.Load() != 1 {
		t.Fatalf("ack after release: %v, %d late; want nil, 1", err, late.n.Load())
	}
}
