package pgstore_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/retry"
)

// sendOnward commits msgs with key's COMPLETED record at now.
func sendOnward(t *testing.T, s *pgstore.Store, key string, now time.Time, msgs ...outbox.Message) {
	t.Helper()
	c, err := s.Claim(testCtx(t), dedup.ClaimRequest{Key: key, Owner: "w", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !c.Acquired {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	if err := s.Complete(testCtx(t), dedup.CompleteRequest{Lease: c.Lease, Response: []byte("ok"), Now: now, ExpiresAt: now.Add(time.Hour), Outbox: msgs}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
}

// A commit with outgoing messages wakes a relay waiting on the outbox's
// channel; the first Wait only begins to listen.
func TestOutboxWaitWakesOnCommit(t *testing.T) {
	p := pool(t)
	s := newStore(t, p, recordsTable(t, p))
	ob := s.Outbox().(*pgstore.Outbox)
	t.Cleanup(func() { _ = ob.Close(context.Background()) })
	ctx := testCtx(t)
	if err := ob.Wait(ctx); err != nil {
		t.Fatalf("first Wait: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := ob.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with nothing committed: %v, want the context's end", err)
	}
	woke := make(chan error, 1)
	go func() { woke <- ob.Wait(ctx) }()
	// A commit before the waiter waits is not lost: the connection
	// listens between Waits.
	sendOnward(t, s, "k1", time.Now(), outbox.Message{Destination: "q", Body: []byte("b")})
	if err := <-woke; err != nil {
		t.Fatalf("Wait after a commit: %v", err)
	}
	// The next returns once more, with no commit, for the commits that
	// sent no notification of their own.
	if err := ob.Wait(ctx); err != nil {
		t.Fatalf("Wait after a notification: %v, want a return for the commits that relied on it", err)
	}
	short2, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if err := ob.Wait(short2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with nothing committed since: %v, want the context's end", err)
	}
	// A Store on one connection has none to listen on.
	conn, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	one := newStore(t, conn, recordsTable(t, p))
	if err := one.Outbox().(*pgstore.Outbox).Wait(ctx); !errors.Is(err, pgstore.ErrNoListen) {
		t.Fatalf("Wait over a single connection: %v, want ErrNoListen", err)
	}
}

// Destinations, ordering keys and headers are any bytes, as Kafka keys
// and headers are: they read back as they were sent.
func TestOutboxBytesRoundTrip(t *testing.T) {
	p := pool(t)
	s := newStore(t, p, recordsTable(t, p))
	m := outbox.Message{Destination: "topic\x00\xff", OrderingKey: "key\x00\xfe", Body: []byte{0, 1, 0xff},
		Headers: map[string]string{"a\x00": "\xff\x00", "": "", "b": strings.Repeat("v", 300)}}
	key := "long key \xff " + strings.Repeat("k", 2000)
	sendOnward(t, s, key, time.Now(), m)
	es, err := s.Outbox().Entries(testCtx(t), outbox.Pending, 0)
	if err != nil || len(es) != 1 {
		t.Fatalf("Entries: %+v, %v", es, err)
	}
	e := es[0]
	if e.ID != outbox.ID(key, 0) || e.Destination != m.Destination || e.OrderingKey != m.OrderingKey || string(e.Body) != string(m.Body) ||
		len(e.Headers) != len(m.Headers) || e.Headers["a\x00"] != "\xff\x00" || e.Headers["b"] != m.Headers["b"] {
		t.Fatalf("entry %+v, want %+v with ID %q", e, m, outbox.ID(key, 0))
	}
}

// More outgoing messages than one commit takes are refused before
// anything is written.
func TestOutboxTooManyMessages(t *testing.T) {
	p := pool(t)
	s := newStore(t, p, recordsTable(t, p))
	now := time.Now()
	c, err := s.Claim(testCtx(t), dedup.ClaimRequest{Key: "k", Owner: "w", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]outbox.Message, pgstore.MaxOutboxPerCommit+1)
	err = s.Complete(testCtx(t), dedup.CompleteRequest{Lease: c.Lease, Now: now, ExpiresAt: now.Add(time.Hour), Outbox: msgs})
	var tm *dedup.TooManyWritesError
	if !errors.As(err, &tm) || tm.Max != pgstore.MaxOutboxPerCommit || tm.Got != len(msgs) {
		t.Fatalf("Complete with %d messages: %v, want a *dedup.TooManyWritesError", len(msgs), err)
	}
	if r, _ := s.Get(testCtx(t), "k"); r.Status != dedup.StatusPending {
		t.Fatalf("record %+v after a refused commit", r)
	}
	if err := s.Complete(testCtx(t), dedup.CompleteRequest{Lease: c.Lease, Now: now, ExpiresAt: now.Add(time.Hour), Outbox: msgs[:pgstore.MaxOutboxPerCommit]}); err != nil {
		t.Fatalf("Complete with %d messages: %v", pgstore.MaxOutboxPerCommit, err)
	}
	if es, _ := s.Outbox().Entries(testCtx(t), "", 0); len(es) != pgstore.MaxOutboxPerCommit || !slices.IsSortedFunc(es, func(a, b outbox.Entry) int { return int(a.Seq - b.Seq) }) {
		t.Fatalf("%d entries, want %d in Seq order", len(es), pgstore.MaxOutboxPerCommit)
	}
}

// DeleteExpired removes the dispatched and dead entries past their
// retention, never a Pending one.
func TestOutboxDeleteExpired(t *testing.T) {
	p := pool(t)
	s := newStore(t, p, recordsTable(t, p))
	ob := s.Outbox().(*pgstore.Outbox)
	now := time.Now()
	sendOnward(t, s, "k", now, outbox.Message{Destination: "q", Body: []byte("1")}, outbox.Message{Destination: "q", Body: []byte("2")},
		outbox.Message{Destination: "q", Body: []byte("3")})
	es, err := ob.Lease(testCtx(t), outbox.LeaseRequest{Owner: "r", Now: now, LeaseUntil: now.Add(time.Minute), Max: 10})
	if err != nil || len(es) != 3 {
		t.Fatalf("Lease: %d entries, %v", len(es), err)
	}
	if err := ob.Dispatched(testCtx(t), []outbox.Lease{es[0].Lease}, now, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := ob.Dead(testCtx(t), es[1].Lease, "refused", now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	n, err := ob.DeleteExpired(testCtx(t), now.Add(time.Minute), 100)
	if err != nil || n != 1 {
		t.Fatalf("DeleteExpired: %d, %v; want the dispatched entry only", n, err)
	}
	left, _ := ob.Entries(testCtx(t), "", 0)
	if len(left) != 2 || left[0].State != outbox.Dead || left[1].State != outbox.Pending {
		t.Fatalf("entries left %+v, want the dead one and the pending one", left)
	}
}

// CreateTable makes the outbox table beside the records table, in its
// schema, with a name that fits PostgreSQL's identifiers however long the
// records table's; the Outbox's Check passes on it.
func TestOutboxTableBesideRecords(t *testing.T) {
	p := pool(t)
	ctx := testCtx(t)
	for _, name := range []string{uniqueName("ob"), uniqueName(strings.Repeat("l", 50))} {
		if err := pgstore.CreateTable(ctx, p, name); err != nil {
			t.Fatalf("CreateTable %s: %v", name, err)
		}
		ob := pgstore.OutboxTable(name)
		t.Cleanup(func() {
			_, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+name+", "+ob+"; DROP SEQUENCE IF EXISTS "+pgstore.OutboxSequence(name))
		})
		if len(ob) > 63 || ob == name {
			t.Fatalf("outbox table %q of %q: want a name of its own within 63 bytes", ob, name)
		}
		var exists bool
		if err := p.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", ob).Scan(&exists); err != nil || !exists {
			t.Fatalf("outbox table %s: exists %v, %v", ob, exists, err)
		}
		s := newStore(t, p, name)
		if err := s.Outbox().(*pgstore.Outbox).Check(ctx); err != nil {
			t.Fatalf("Check: %v", err)
		}
		if err := pgstore.CreateTable(ctx, p, name); err != nil {
			t.Fatalf("CreateTable again: %v", err)
		}
	}
	if a, b := pgstore.OutboxTable("app."+strings.Repeat("x", 63)), pgstore.OutboxTable("app."+strings.Repeat("x", 62)+"y"); a == b || !strings.HasPrefix(a, "app.") {
		t.Fatalf("outbox tables %q and %q: want distinct names in the records table's schema", a, b)
	}
}

// callHooks records the operations of the store calls made.
type callHooks struct {
	mu  sync.Mutex
	ops []string
}

func (h *callHooks) OnStoreCall(_ context.Context, op string, _ time.Duration, _ error) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// The relay's calls go through the instruments, and a mark whose answer
// was lost with the connection, after the server carried it out, is
// retried and recognised as done, not as a lost lease.
func TestOutboxMarksSettleOnRetry(t *testing.T) {
	table := recordsTable(t, pool(t))
	db, proxy := proxiedPool(t)
	var hooks callHooks
	s := newStore(t, db, table, pgstore.WithHooks(&hooks),
		pgstore.WithRetryPolicy(retry.Policy{Initial: time.Millisecond, Max: 10 * time.Millisecond, MaxAttempts: 4}))
	ob := s.Outbox()
	ctx := testCtx(t)
	now := time.Now()
	sendOnward(t, s, "k", now, outbox.Message{Destination: "q", OrderingKey: "a", Body: []byte("1")},
		outbox.Message{Destination: "q", OrderingKey: "b", Body: []byte("2")}, outbox.Message{Destination: "q", OrderingKey: "c", Body: []byte("3")},
		outbox.Message{Destination: "q", OrderingKey: "d", Body: []byte("4")})
	es, err := ob.Lease(ctx, outbox.LeaseRequest{Owner: "r", Now: now, LeaseUntil: now.Add(time.Minute), Max: 10})
	if err != nil || len(es) != 4 {
		t.Fatalf("Lease: %d entries, %v", len(es), err)
	}
	// Each statement once, so that the lost write is the mark itself,
	// not its preparation.
	bogus := outbox.Lease{ID: "none", Owner: "r", Version: 1}
	_ = ob.Dispatched(ctx, []outbox.Lease{bogus}, now, now)
	_ = ob.Retry(ctx, bogus, "x", now, now)
	_ = ob.Release(ctx, bogus, "x", now, now)
	_ = ob.Dead(ctx, bogus, "x", now, now)
	for name, mark := range map[string]func() error{
		"Dispatched": func() error { return ob.Dispatched(ctx, []outbox.Lease{es[0].Lease}, now, now.Add(time.Hour)) },
		"Retry":      func() error { return ob.Retry(ctx, es[1].Lease, "timeout", now, now.Add(time.Second)) },
		"Dead":       func() error { return ob.Dead(ctx, es[2].Lease, "refused", now, now.Add(time.Hour)) },
		"Release":    func() error { return ob.Release(ctx, es[3].Lease, "not sent", now, now.Add(time.Second)) },
	} {
		proxy.LoseReplyNext(1)
		if err := mark(); err != nil {
			t.Fatalf("%s whose answer was lost: %v, want it recognised as done", name, err)
		}
	}
	got := map[string]outbox.Entry{}
	all, err := ob.Entries(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		got[e.OrderingKey] = e
	}
	if got["a"].State != outbox.Dispatched || got["b"].State != outbox.Pending || got["b"].Attempts != 1 || got["c"].State != outbox.Dead ||
		got["d"].State != outbox.Pending || got["d"].Releases != 1 || got["d"].Attempts != 0 {
		t.Fatalf("entries %+v: want a dispatched, b given back once, c dead, d released once", all)
	}
	hooks.mu.Lock()
	defer hooks.mu.Unlock()
	for _, op := range []string{storeinstr.OpOutboxLease, storeinstr.OpOutboxDispatched, storeinstr.OpOutboxRetry, storeinstr.OpOutboxRelease, storeinstr.OpOutboxDead, storeinstr.OpOutboxEntries} {
		if !slices.Contains(hooks.ops, op) {
			t.Fatalf("the hooks saw %v, not %s", hooks.ops, op)
		}
	}
}

// Relays leasing and marking at once, while workers commit into the same
// lanes: every entry is sent once, each lane in the order its entries
// were committed (a worker's own in the order it sent them).
func TestOutboxRelaysKeepLaneOrderUnderLoad(t *testing.T) {
	p := pool(t)
	s := newStore(t, p, recordsTable(t, p))
	ob := s.Outbox()
	const workers, perWorker, lanes, relays = 3, 40, 5, 4
	ctx := testCtx(t)
	var commits sync.WaitGroup
	for w := range workers {
		commits.Go(func() {
			for i := range perWorker {
				now := time.Now()
				key := "w" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				c, err := s.Claim(ctx, dedup.ClaimRequest{Key: key, Owner: key, Now: now, LeaseUntil: now.Add(time.Minute)})
				if err == nil {
					err = s.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Now: now, ExpiresAt: now.Add(time.Hour), Outbox: []outbox.Message{
						{Destination: "q", OrderingKey: "lane" + strconv.Itoa(i%lanes), Body: []byte(strconv.Itoa(w) + "/" + strconv.Itoa(i))},
						{Destination: "q", Body: []byte("u")},
					}})
				}
				if err != nil {
					t.Errorf("worker %d commit %d: %v", w, i, err)
					return
				}
			}
		})
	}
	var (
		mu     sync.Mutex
		sent   = map[string]int{}
		byLane = map[string][]outbox.Entry{}
		done   = make(chan struct{})
	)
	var relaying sync.WaitGroup
	for r := range relays {
		relaying.Go(func() {
			owner := "relay" + strconv.Itoa(r)
			for {
				select {
				case <-done:
					return
				default:
				}
				now := time.Now()
				es, err := ob.Lease(ctx, outbox.LeaseRequest{Owner: owner, Now: now, LeaseUntil: now.Add(time.Minute), Max: 7})
				if err != nil {
					t.Errorf("%s: Lease: %v", owner, err)
					return
				}
				mu.Lock()
				for _, e := range es {
					sent[e.ID]++
					if e.OrderingKey != "" {
						byLane[e.OrderingKey] = append(byLane[e.OrderingKey], e)
					}
				}
				mu.Unlock()
				var ls []outbox.Lease
				for _, e := range es {
					ls = append(ls, e.Lease)
				}
				if err := ob.Dispatched(ctx, ls, now, now.Add(time.Hour)); err != nil {
					t.Errorf("%s: Dispatched: %v", owner, err)
					return
				}
			}
		})
	}
	commits.Wait()
	for {
		pending, err := ob.Entries(ctx, outbox.Pending, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) == 0 || t.Failed() || ctx.Err() != nil {
			break
		}
		runtime.Gosched()
	}
	close(done)
	relaying.Wait()
	if len(sent) != workers*perWorker*2 {
		t.Fatalf("%d entries sent, want %d", len(sent), workers*perWorker*2)
	}
	for id, n := range sent {
		if n != 1 {
			t.Fatalf("entry %s sent %d times", id, n)
		}
	}
	for lane, es := range byLane {
		last := map[string]int{}
		for i, e := range es {
			if i > 0 && e.Seq <= es[i-1].Seq {
				t.Fatalf("lane %s: Seq %d sent after %d", lane, e.Seq, es[i-1].Seq)
			}
			w, n, _ := strings.Cut(string(e.Body), "/")
			k, _ := strconv.Atoi(n)
			if l, ok := last[w]; ok && k <= l {
				t.Fatalf("lane %s: worker %s's message %d sent after its %d", lane, w, k, l)
			}
			last[w] = k
		}
	}
}

// A consumer that sends onward checks at start that the outbox table
// exists: a records table made before the outbox was is refused, with
// what to run, until CreateTable adds it.
func TestOutboxCheckedWithSendsOnward(t *testing.T) {
	p := pool(t)
	table := recordsTable(t, p)
	ob := pgstore.OutboxTable(table)
	if _, err := p.Exec(testCtx(t), "DROP TABLE "+ob); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+ob+"; DROP SEQUENCE IF EXISTS "+pgstore.OutboxSequence(table))
	})
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	g, err := consumer.NewGuard(newStore(t, p, table), h, consumer.SendsOnward())
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Check(testCtx(t)); !errors.Is(err, consumer.ErrMisconfigured) || !strings.Contains(err.Error(), "CreateTable") {
		t.Fatalf("Check without the outbox table: %v, want ErrMisconfigured saying to run CreateTable", err)
	}
	if err := pgstore.CreateTable(testCtx(t), p, table); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(testCtx(t)); err != nil {
		t.Fatalf("Check after CreateTable: %v", err)
	}
}

// Each error of a missing table names that table: the records table to
// the Store, the outbox table to the relay's view, with or without the
// records table beside it.
func TestMissingTablesNamed(t *testing.T) {
	p := pool(t)
	ctx := testCtx(t)
	absent := uniqueName("onceq_absent")
	wantNamed := func(what string, err error, table string) {
		t.Helper()
		if retry.Classify(err) != retry.Misconfigured || !strings.Contains(err.Error(), "table "+table+" does not exist") &&
			!strings.Contains(err.Error(), `relation "public.`+table+`" does not exist`) {
			t.Errorf("%s: %v (%v), want Misconfigured saying %s does not exist", what, err, retry.Classify(err), table)
		}
	}
	wantNamed("Check of a missing records table", newStore(t, p, absent).Check(ctx), absent)
	ob := newStore(t, p, absent).Outbox()
	wantNamed("the outbox's Check, neither table there", ob.(*pgstore.Outbox).Check(ctx), pgstore.OutboxTable(absent))
	_, err := ob.Lease(ctx, outbox.LeaseRequest{Owner: "r", Max: 1, Now: time.Now(), LeaseUntil: time.Now().Add(time.Minute)})
	wantNamed("Lease, neither table there", err, pgstore.OutboxTable(absent))
	table := recordsTable(t, p)
	if _, err := p.Exec(ctx, "DROP TABLE "+pgstore.OutboxTable(table)); err != nil {
		t.Fatal(err)
	}
	ob = newStore(t, p, table).Outbox()
	wantNamed("the outbox's Check beside its records table", ob.(*pgstore.Outbox).Check(ctx), pgstore.OutboxTable(table))
	_, err = ob.Lease(ctx, outbox.LeaseRequest{Owner: "r", Max: 1, Now: time.Now(), LeaseUntil: time.Now().Add(time.Minute)})
	wantNamed("Lease beside its records table", err, pgstore.OutboxTable(table))
}
