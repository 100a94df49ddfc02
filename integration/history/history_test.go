package history_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/examples/storehistory"
	"github.com/onceq/onceq/integration/history"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// unfenced is the broken Store: its Complete ignores the lease's owner and
// version and commits over whichever claim holds the record now.
type unfenced struct{ *memstore.Store }

func (u unfenced) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	if r, err := u.Get(ctx, req.Lease.Key); err == nil && r.Status == dedup.StatusPending {
		req.Lease.Owner, req.Lease.Version = r.Owner, r.Version
	}
	return u.Store.Complete(ctx, req)
}

// staleCommit is the broken Store with no lease check at all: a Complete
// whose lease another claim has since taken over commits as given, leaving
// the record the stale holder's commit would have left in its own time
// (COMPLETED, one version on, its owner). Nothing after it differs from a
// history where that commit came first: only the lease check can tell.
type staleCommit struct{ *memstore.Store }

func (s staleCommit) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	err := s.Store.Complete(ctx, req)
	r, gerr := s.Get(ctx, req.Lease.Key)
	if !errors.Is(err, dedup.ErrLeaseLost) || gerr != nil || r.Status != dedup.StatusPending {
		return err
	}
	// Write the stale lease's record: drop every record (the test has one
	// key), claim the key afresh as the stale owner, which is version 1,
	// the stale lease's, and commit that.
	if req.Lease.Version != 1 {
		return fmt.Errorf("staleCommit writes version 1 leases only, not %d", req.Lease.Version)
	}
	s.Sweep(time.Unix(1<<40, 0))
	c, err := s.Claim(ctx, dedup.ClaimRequest{Key: req.Lease.Key, Owner: req.Lease.Owner, Now: req.Now, LeaseUntil: req.Now.Add(time.Hour)})
	if err != nil {
		return err
	}
	req.Lease = c.Lease
	return s.Store.Complete(ctx, req)
}

// splitCommit is the broken Store whose business writes are not one
// transaction with the record: the first Complete of each key applies its
// writes, then fails to write the record and answers an error, so the
// outcome is unknown and the record still PENDING; whoever runs the
// message next commits its effect again.
type splitCommit struct {
	*memstore.Store
	mu   sync.Mutex
	seen map[string]bool
}

func (s *splitCommit) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	s.mu.Lock()
	first := !s.seen[req.Lease.Key]
	s.seen[req.Lease.Key] = true
	s.mu.Unlock()
	if !first {
		return s.Store.Complete(ctx, req)
	}
	for _, w := range req.Writes {
		w.(memstore.Write).Apply()
	}
	return errors.New("connection reset after the business writes")
}

// answerLost applies every Complete and then loses its answer, as a
// connection reset after the write committed does: the outcome is unknown.
type answerLost struct{ dedup.Store }

func (a answerLost) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	if err := a.Store.Complete(ctx, req); err != nil {
		return err
	}
	return errors.New("connection reset after the write")
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// worker is one worker process: a Guard over the shared store, recording
// its own history as the order worker does, and acking what the consumer
// would ack.
type worker struct {
	guard   *consumer.Guard
	rec     *storehistory.Recorder
	history bytes.Buffer
	// gate, when set, holds the handler until it is closed; entered is
	// closed when the handler starts.
	gate, entered chan struct{}
	// holds are per-key gates (hold).
	holds sync.Map
}

type keyHold struct{ entered, gate chan struct{} }

// hold makes the next run of key's handler close entered and wait for gate.
func (w *worker) hold(key string) (entered, gate chan struct{}) {
	h := &keyHold{make(chan struct{}), make(chan struct{})}
	w.holds.Store(key, h)
	return h.entered, h.gate
}

func newWorker(t *testing.T, store dedup.Store, clk consumer.Clock, effects *effects) *worker {
	t.Helper()
	w := &worker{}
	w.rec = storehistory.New(store, &w.history)
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		if w.gate != nil {
			close(w.entered)
			<-w.gate
		}
		if h, ok := w.holds.LoadAndDelete(string(m.Body)); ok {
			close(h.(*keyHold).entered)
			<-h.(*keyHold).gate
		}
		key := m.IdempotencyKey
		return consumer.Result{Response: []byte("done"), Writes: []dedup.Write{memstore.Write{Apply: func() { effects.add(key) }}}}, nil
	})
	g, err := consumer.NewGuard(w.rec, h, consumer.WithClock(clk), consumer.LeaseTTL(time.Hour), consumer.HandlerTimeout(30*time.Minute),
		// Store outages are retried after a real wait: keep it short.
		consumer.FailedRetryDelay(time.Millisecond), consumer.PendingRecheck(time.Millisecond),
		// The clock jumps by hours: a record must outlive every jump.
		consumer.Retention(10_000*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	w.guard = g
	return w
}

// process runs one delivery of key and acks it when the consumer would.
func (w *worker) process(ctx context.Context, id, key string) consumer.Outcome {
	m := &consumer.Message{ID: id, Body: []byte(key), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: key}}
	o := w.guard.Process(ctx, m)
	w.rec.OnMessageSettled(ctx, m, o.Kind.Action(), nil)
	return o
}

type effects struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *effects) add(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[key]++
}

func check(t *testing.T, ws ...*worker) history.Report {
	t.Helper()
	return checkHistory(t, load(t, ws...))
}

// load reads the workers' histories.
func load(t *testing.T, ws ...*worker) *history.History {
	t.Helper()
	h := history.New()
	for _, w := range ws {
		if err := w.rec.Err(); err != nil {
			t.Fatal(err)
		}
		if err := h.Add(bytes.NewReader(w.history.Bytes())); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func checkHistory(t *testing.T, h *history.History) history.Report {
	t.Helper()
	r := history.Check(h, history.Options{Timeout: 10 * time.Second})
	t.Log(r.Line())
	return r
}

// takeover runs two workers on one key: A claims it and stalls in its
// handler past its lease; B takes the key over and stalls too; A's handler
// returns and commits; then B's.
func takeover(t *testing.T, store dedup.Store) (history.Report, *effects) {
	ctx := context.Background()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	fx := &effects{}
	a, b := newWorker(t, store, clk, fx), newWorker(t, store, clk, fx)
	a.gate, a.entered = make(chan struct{}), make(chan struct{})
	b.gate, b.entered = make(chan struct{}), make(chan struct{})
	aDone := make(chan consumer.Outcome)
	go func() { aDone <- a.process(ctx, "m1", "order-1") }()
	<-a.entered
	clk.advance(2 * time.Hour) // A's lease has run out
	bDone := make(chan consumer.Outcome)
	go func() { bDone <- b.process(ctx, "m1-again", "order-1") }()
	<-b.entered
	close(a.gate)
	oa := <-aDone
	close(b.gate)
	ob := <-bDone
	t.Logf("A: %s, B: %s", oa.Kind, ob.Kind)
	// A final read, as the chaos driver makes after its run.
	reader := newWorker(t, store, clk, fx)
	if _, err := reader.rec.Get(ctx, oa.IdempotencyKey); err != nil {
		t.Fatal(err)
	}
	return check(t, a, b, reader), fx
}

func TestBrokenFencingIsCaught(t *testing.T) {
	r, fx := takeover(t, unfenced{memstoretest.New(t)})
	if r.OK() || r.Illegal != 1 || !strings.HasPrefix(r.Verdict(), "not linearizable: key_hash ") {
		t.Fatalf("a store committing a fenced owner's result passed the check: %s", r.Line())
	}
	if r.FencedCommits != 1 {
		t.Errorf("fenced_commits=%d, want 1", r.FencedCommits)
	}
	if !strings.Contains(r.Violation, "complete(owner ") {
		t.Errorf("the violation does not name the fenced Complete: %s", r.Violation)
	}
	t.Logf("effects: %v", fx.n)
}

// TestStaleCommitIsCaught: a Store that commits a stale lease as given
// leaves a history every later call agrees with; the model's lease check
// alone makes it illegal.
func TestStaleCommitIsCaught(t *testing.T) {
	r, _ := takeover(t, staleCommit{memstoretest.New(t)})
	if r.Illegal != 1 || !strings.Contains(r.Violation, "no legal point for complete(owner ") {
		t.Fatalf("a Complete committed from a stale lease passed the model: %s", r.Line())
	}
	if r.FencedCommits != 1 {
		t.Errorf("fenced_commits=%d, want 1", r.FencedCommits)
	}
}

func TestFencedStorePasses(t *testing.T) {
	r, fx := takeover(t, memstoretest.New(t))
	if !r.OK() || r.Verdict() != "linearizable" || r.Acks != 1 {
		t.Fatalf("a correct store's history failed the check: %s", r.Line())
	}
	for k, n := range fx.n {
		if n != 1 {
			t.Errorf("%s applied %d times", k, n)
		}
	}
}

// TestUnknownOutcomes: every Complete commits and loses its answer; the
// next delivery finds the key COMPLETED. The unknown Complete must be
// taken as possibly applied for the history to be linearizable.
func TestUnknownOutcomes(t *testing.T) {
	ctx := context.Background()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	store := answerLost{memstoretest.New(t)}
	fx := &effects{}
	ws := []*worker{newWorker(t, store, clk, fx), newWorker(t, store, clk, fx), newWorker(t, store, clk, fx)}
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			for k := range 40 {
				key := "order-" + string(rune('a'+k%26)) + string(rune('a'+k/26))
				for d := 0; ; d++ {
					o := w.process(ctx, "m", key)
					if o.Kind.Action() == consumer.Ack {
						break
					}
					if d > 10_000 {
						t.Errorf("worker %d: key %s not settled: %s %v", i, key, o.Kind, o.Err)
						return
					}
					if o.Kind == consumer.InFlightElsewhere {
						runtime.Gosched() // its holder is about to commit
					} else {
						clk.advance(time.Second) // past the retry delay
					}
				}
			}
		})
	}
	wg.Wait()
	r := check(t, ws...)
	if !r.OK() || r.Verdict() != "linearizable" {
		t.Fatalf("a history with lost answers failed the check: %s", r.Line())
	}
	if r.Unknown < 40 {
		t.Errorf("unknown=%d, want at least one per key", r.Unknown)
	}
}

// TestKilledProcess: a call with no return (its process was killed) may
// have taken effect: a later read of what it wrote is legal. A read of a
// record no call wrote is not.
func TestKilledProcess(t *testing.T) {
	killed := `{"id":1,"ev":"call","op":"claim","key":"k","t":100,"owner":"a","now":100,"until":1000}
{"id":2,"ev":"call","op":"complete","key":"k","t":200,"owner":"a","version":1,"now":200,"until":99999}
{"id":3,"ev":"call","op":"claim","key":"k","t":300,"owner":"a2","now":300,"until":1300}
{"id":4,"ev":"cal`
	reader := `{"id":1,"ev":"call","op":"get","key":"k","t":400}
{"id":1,"ev":"return","op":"get","key":"k","t":500,"out":"ok","record":{"status":"COMPLETED","version":2,"owner":"a"}}
`
	h := history.New()
	for _, s := range []string{killed, reader} {
		if err := h.Add(strings.NewReader(s)); err != nil {
			t.Fatal(err)
		}
	}
	if r := history.Check(h, history.Options{}); !r.OK() || r.Unknown != 3 {
		t.Fatalf("a killed process's calls taken for failed: %s", r.Line())
	}

	forged := strings.Replace(reader, `"version":2`, `"version":5`, 1)
	h = history.New()
	for _, s := range []string{killed, forged} {
		if err := h.Add(strings.NewReader(s)); err != nil {
			t.Fatal(err)
		}
	}
	if r := history.Check(h, history.Options{}); r.Illegal != 1 {
		t.Fatalf("a read of a version no call wrote passed: %s", r.Line())
	}
}

// TestAnomalies counts each anomaly on a history made for it.
func TestAnomalies(t *testing.T) {
	lines := func(s ...string) string { return strings.Join(s, "\n") + "\n" }
	for _, c := range []struct {
		name, history string
		want          func(r history.Report) int
	}{
		{"lost", lines(
			`{"id":1,"ev":"call","op":"claim","key":"k","t":1,"owner":"a","now":1,"until":100}`,
			`{"id":1,"ev":"return","op":"claim","key":"k","t":2,"out":"ok","acquired":true,"record":{"status":"PENDING","version":1,"owner":"a"}}`,
			`{"ev":"settle","key":"k","t":3,"action":"ack","out":"ok"}`,
		), func(r history.Report) int { return r.Lost }},
		{"acked_uncommitted", lines(
			`{"id":1,"ev":"call","op":"claim","key":"k","t":1,"owner":"a","now":1,"until":100}`,
			`{"id":1,"ev":"return","op":"claim","key":"k","t":2,"out":"ok","acquired":true,"record":{"status":"PENDING","version":1,"owner":"a"}}`,
			`{"ev":"settle","key":"k","t":3,"action":"ack","out":"ok"}`,
			`{"id":2,"ev":"call","op":"complete","key":"k","t":4,"owner":"a","version":1,"now":4,"until":1000}`,
			`{"id":2,"ev":"return","op":"complete","key":"k","t":5,"out":"ok"}`,
		), func(r history.Report) int { return r.AckedUncommitted }},
		{"duplicated", lines(
			`{"id":1,"ev":"call","op":"claim_complete","key":"k","t":1,"owner":"a","now":1,"until":100}`,
			`{"id":1,"ev":"return","op":"claim_complete","key":"k","t":2,"out":"ok","acquired":true,"record":{"status":"COMPLETED","version":1,"owner":"a"}}`,
			`{"id":2,"ev":"call","op":"claim_complete","key":"k","t":3,"owner":"b","now":3,"until":100}`,
			`{"id":2,"ev":"return","op":"claim_complete","key":"k","t":4,"out":"ok","acquired":true,"record":{"status":"COMPLETED","version":2,"owner":"b"}}`,
		), func(r history.Report) int { return r.Duplicated }},
		{"committed again past retention is a new message", lines(
			`{"id":1,"ev":"call","op":"claim_complete","key":"k","t":1,"owner":"a","now":1,"until":100}`,
			`{"id":1,"ev":"return","op":"claim_complete","key":"k","t":2,"out":"ok","acquired":true,"record":{"status":"COMPLETED","version":1,"owner":"a"}}`,
			`{"id":2,"ev":"call","op":"claim_complete","key":"k","t":3,"owner":"b","now":101,"until":200}`,
			`{"id":2,"ev":"return","op":"claim_complete","key":"k","t":4,"out":"ok","acquired":true,"record":{"status":"COMPLETED","version":2,"owner":"b"},"previous":{"status":"COMPLETED","version":1,"owner":"a"}}`,
		), func(r history.Report) int {
			if r.Duplicated == 0 && r.OK() {
				return 1
			}
			return 0
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := history.New()
			if err := h.Add(strings.NewReader(c.history)); err != nil {
				t.Fatal(err)
			}
			r := history.Check(h, history.Options{})
			if c.want(r) != 1 {
				t.Fatalf("%s not counted: %s", c.name, r.Line())
			}
		})
	}
}

func TestMalformedLine(t *testing.T) {
	h := history.New()
	err := h.Add(strings.NewReader("{\"id\":1,\"ev\":\"call\",\"op\":\"get\",\"key\":\"k\",\"t\":1}\nnot json\n{}\n"))
	if !errors.Is(err, history.ErrMalformed) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err = %v, want ErrMalformed at line 2", err)
	}
}

// TestBudget: once the budget is spent the keys left are undecided, not
// waited for, and the verdict says so.
func TestBudget(t *testing.T) {
	h := history.New()
	err := h.Add(strings.NewReader(`{"id":1,"ev":"call","op":"claim","key":"k","t":1,"owner":"a","now":1,"until":100}
{"id":1,"ev":"return","op":"claim","key":"k","t":2,"out":"ok","acquired":true,"record":{"status":"PENDING","version":1,"owner":"a"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := history.Check(h, history.Options{Budget: time.Nanosecond})
	if r.TimedOut != 1 || r.Verdict() != "unknown: 1 keys not decided in time" || !r.OK() {
		t.Fatalf("%s", r.Line())
	}
}

// TestTakeoverStorm: on every key a worker stalls in its handler past
// its lease (the shared clock jumps, so leases of other keys in flight run
// out too), another takes the key over and commits, the first commits late,
// a third delivers the key meanwhile, and every third Complete loses its
// answer. Over a correct store every such interleaving must be
// linearizable and free of anomalies: the check must not cry wolf.
func TestTakeoverStorm(t *testing.T) {
	ctx := context.Background()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	store := &sometimesLost{Store: memstoretest.New(t)}
	fx := &effects{}
	var ws []*worker
	for range 3 {
		ws = append(ws, newWorker(t, store, clk, fx))
	}
	// settle delivers key through w until it is acked.
	settle := func(w *worker, key string) {
		for d := 0; ; d++ {
			if o := w.process(ctx, "m", key); o.Kind.Action() == consumer.Ack {
				return
			}
			if d > 10_000 {
				t.Errorf("key %s not settled", key)
				return
			}
			runtime.Gosched()
			clk.advance(time.Second)
		}
	}
	var wg sync.WaitGroup
	for k := range 30 {
		key := fmt.Sprintf("order-%d", k)
		a, b, c := ws[k%3], ws[(k+1)%3], ws[(k+2)%3]
		wg.Go(func() {
			entered, gate := a.hold(key)
			stalled := make(chan struct{})
			go func() { defer close(stalled); settle(a, key) }()
			<-entered
			clk.advance(2 * time.Hour)
			var inner sync.WaitGroup
			inner.Go(func() { settle(c, key) })
			settle(b, key)
			close(gate)
			<-stalled
			inner.Wait()
		})
	}
	wg.Wait()
	r := check(t, ws...)
	if !r.OK() || r.Verdict() != "linearizable" {
		t.Fatalf("a correct store's history failed the check: %s", r.Line())
	}
	takeovers := 0
	for _, w := range ws {
		takeovers += bytes.Count(w.history.Bytes(), []byte(`"previous":{"status":"PENDING"`))
	}
	if takeovers < 30 || r.Unknown == 0 {
		t.Fatalf("%d takeovers of a live holder's lease, %d unknown outcomes: the storm proves nothing", takeovers, r.Unknown)
	}
	for k, n := range fx.n {
		if n != 1 {
			t.Errorf("%s applied %d times", k, n)
		}
	}
}

// sometimesLost loses the answer of every third Complete, after applying it.
type sometimesLost struct {
	dedup.Store
	mu sync.Mutex
	n  int
}

func (s *sometimesLost) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	err := s.Store.Complete(ctx, req)
	s.mu.Lock()
	s.n++
	lose := s.n%3 == 0
	s.mu.Unlock()
	if err == nil && lose {
		return errors.New("connection reset after the write")
	}
	return err
}

// checkLines checks the histories of processes, one string each.
func checkLines(t *testing.T, processes ...string) history.Report {
	t.Helper()
	h := history.New()
	for _, p := range processes {
		if err := h.Add(strings.NewReader(p)); err != nil {
			t.Fatal(err)
		}
	}
	r := history.Check(h, history.Options{})
	t.Log(r.Line())
	return r
}

// TestTTLRemovesExpiredLease: A's handler outlives its lease, TTL removes
// the expired PENDING record, A's late Complete finds nothing (its lease is
// lost), and the redelivery claims the key afresh at version 1 and
// commits. Every call is what a correct Store answers.
func TestTTLRemovesExpiredLease(t *testing.T) {
	a := `{"id":1,"ev":"call","op":"claim","key":"k","t":100,"owner":"a","now":100,"until":1000}
{"id":1,"ev":"return","op":"claim","key":"k","t":110,"out":"ok","acquired":true,"record":{"status":"PENDING","version":1,"owner":"a"}}
{"id":2,"ev":"call","op":"complete","key":"k","t":1500,"owner":"a","version":1,"now":1500,"until":99999}
{"id":2,"ev":"return","op":"complete","key":"k","t":1510,"out":"fail","err":"lease lost"}
{"ev":"settle","key":"k","t":1520,"action":"retry","out":"ok"}
`
	b := `{"id":1,"ev":"call","op":"claim","key":"k","t":1600,"owner":"b","now":1600,"until":2600}
{"id":1,"ev":"return","op":"claim","key":"k","t":1610,"out":"ok","acquired":true,"record":{"status":"PENDING","version":1,"owner":"b"}}
{"id":2,"ev":"call","op":"complete","key":"k","t":1700,"owner":"b","version":1,"now":1700,"until":99999}
{"id":2,"ev":"return","op":"complete","key":"k","t":1710,"out":"ok"}
{"ev":"settle","key":"k","t":1720,"action":"ack","out":"ok"}
{"id":3,"ev":"call","op":"get","key":"k","t":1800}
{"id":3,"ev":"return","op":"get","key":"k","t":1810,"out":"ok","record":{"status":"COMPLETED","version":2,"owner":"b"}}
`
	if r := checkLines(t, a, b); !r.OK() || r.Verdict() != "linearizable" {
		t.Fatalf("TTL's removal of an expired lease taken for a violation: %s", r.Line())
	}
	// The removal comes no earlier than the expiry: a Complete that
	// returned before it found the lease it held.
	early := strings.NewReplacer(`"t":1500,`, `"t":500,`, `"t":1510,`, `"t":510,`).Replace(a)
	if r := checkLines(t, early, b); r.Illegal != 1 {
		t.Fatalf("a Complete refused while its lease was live passed: %s", r.Line())
	}
}

// TestFreshClaimOverLiveCompleted: a claim that starts the key afresh at
// version 1 while a COMPLETED record is live (within its retention) is a
// record lost, whatever TTL may remove later.
func TestFreshClaimOverLiveCompleted(t *testing.T) {
	a := `{"id":1,"ev":"call","op":"claim","key":"k","t":100,"owner":"a","now":100,"until":1000}
{"id":1,"ev":"return","op":"claim","key":"k","t":110,"out":"ok","acquired":true,"record":{"status":"PENDING","version":1,"owner":"a"}}
{"id":2,"ev":"call","op":"complete","key":"k","t":200,"owner":"a","version":1,"now":200,"until":5000}
{"id":2,"ev":"return","op":"complete","key":"k","t":210,"out":"ok"}
`
	fresh := `{"id":1,"ev":"call","op":"claim","key":"k","t":1600,"owner":"b","now":1600,"until":2600}
{"id":1,"ev":"return","op":"claim","key":"k","t":1610,"out":"ok","acquired":true,"record":{"status":"PENDING","version":1,"owner":"b"}}
`
	r := checkLines(t, a, fresh)
	if r.Illegal != 1 || !strings.Contains(r.Violation, "claim(owner b) → acquired v1") {
		t.Fatalf("a fresh claim over a live COMPLETED record passed: %s", r.Line())
	}
	// Past the retention the same claim is a new message.
	late := strings.NewReplacer(`"t":1600,`, `"t":6000,`, `"now":1600,"until":2600`, `"now":6000,"until":7000`, `"t":1610,`, `"t":6010,`).Replace(fresh)
	if r := checkLines(t, a, late); !r.OK() {
		t.Fatalf("a claim past the COMPLETED record's retention refused: %s", r.Line())
	}
}

// TestDoubleCommitFromEffects: each key's first commit applies its effect
// and leaves the record PENDING with its outcome unknown; the delivery
// after the lease ran out commits it again. The model may take the
// unknown commit as never applied, so the calls alone show one commit:
// the effects counted show two.
func TestDoubleCommitFromEffects(t *testing.T) {
	ctx := context.Background()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	store := &splitCommit{Store: memstoretest.New(t), seen: map[string]bool{}}
	fx := &effects{}
	w := newWorker(t, store, clk, fx)
	keys := []string{"order-1", "order-2", "order-3"}
	for _, key := range keys {
		for d := 0; w.process(ctx, "m", key).Kind.Action() != consumer.Ack; d++ {
			if d > 100 {
				t.Fatalf("key %s not settled", key)
			}
			clk.advance(2 * time.Hour) // past the lease of the PENDING record left
		}
	}
	if r := check(t, w); !r.OK() || r.Duplicated != 0 || r.Unknown < len(keys) {
		t.Fatalf("the calls alone: %s, want no anomaly and an unknown commit per key", r.Line())
	}
	h := load(t, w)
	for key, n := range fx.n { // by stored key, as the history has them
		h.AddEffects(key, n)
	}
	r := checkHistory(t, h)
	if r.Duplicated != len(keys) || r.Effects != len(keys) || r.Keys != len(keys) || r.OK() {
		t.Fatalf("effects %v: duplicated=%d effects=%d keys=%d, want %d each: %s", fx.n, r.Duplicated, r.Effects, r.Keys, len(keys), r.Line())
	}
	// An acked key whose effect was looked for and never applied is lost.
	h = load(t, w)
	for key := range fx.n {
		h.AddEffects(key, 0)
		break
	}
	if r := checkHistory(t, h); r.Lost != 1 {
		t.Fatalf("an acked key with no effect: lost=%d, want 1: %s", r.Lost, r.Line())
	}
}

// TestTTLSweepBeforeLateComplete runs the pattern on a Guard: A's handler
// outlives its lease, TTL sweeps the expired PENDING record, A's Complete
// finds nothing, and the redelivery claims the key afresh and commits.
// (The histories' times are the wall clock's, the leases' the fake
// clock's, which starts in the past: every fake expiry has passed by the
// wall clock, as TTL's removal needs.)
func TestTTLSweepBeforeLateComplete(t *testing.T) {
	ctx := context.Background()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	store := memstoretest.New(t)
	fx := &effects{}
	a, b := newWorker(t, store, clk, fx), newWorker(t, store, clk, fx)
	a.gate, a.entered = make(chan struct{}), make(chan struct{})
	aDone := make(chan consumer.Outcome)
	go func() { aDone <- a.process(ctx, "m1", "order-1") }()
	<-a.entered
	clk.advance(2 * time.Hour) // A's lease has run out
	if n := store.Sweep(clk.Now()); n != 1 {
		t.Fatalf("swept %d records, want A's", n)
	}
	close(a.gate)
	oa := <-aDone
	ob := b.process(ctx, "m1-again", "order-1")
	if oa.Kind != consumer.LeaseLost || ob.Kind.Action() != consumer.Ack {
		t.Fatalf("A: %s, B: %s; want A's lease lost and B's run committed", oa.Kind, ob.Kind)
	}
	if _, err := b.rec.Get(ctx, ob.IdempotencyKey); err != nil {
		t.Fatal(err)
	}
	if r := check(t, a, b); !r.OK() || r.Verdict() != "linearizable" {
		t.Fatalf("TTL's removal of an expired lease taken for a violation: %s", r.Line())
	}
	for k, n := range fx.n {
		if n != 1 {
			t.Errorf("%s applied %d times", k, n)
		}
	}
}

// TestResetsOutsideTheHistory: a claim that takes over a DEAD_LETTER
// record one version on, as a redrive's reset leaves it, is a violation
// unless the key's resets are counted (Options.Resets), and then only
// over a record a reset takes: never a COMPLETED one, even past its
// retention.
func TestResetsOutsideTheHistory(t *testing.T) {
	lines := func(status string) string {
		return `{"id":1,"ev":"call","op":"claim","key":"k","t":100,"owner":"a","now":100,"until":1000}
{"id":1,"ev":"return","op":"claim","key":"k","t":110,"out":"ok","acquired":true,"record":{"status":"PENDING","version":1,"owner":"a"}}
{"id":2,"ev":"call","op":"` + map[string]string{"DEAD_LETTER": "fail", "COMPLETED": "complete"}[status] + `","key":"k","t":200,"owner":"a","version":1,"now":200,"until":250,"dead_letter":true}
{"id":2,"ev":"return","op":"x","key":"k","t":210,"out":"ok"}
{"id":3,"ev":"call","op":"claim","key":"k","t":300,"owner":"b","now":300,"until":1300}
{"id":3,"ev":"return","op":"claim","key":"k","t":310,"out":"ok","acquired":true,"record":{"status":"PENDING","version":4,"owner":"b"},"previous":{"status":"FAILED","version":3,"owner":"a"}}
`
	}
	check := func(status string, resets map[string]int) history.Report {
		h := history.New()
		if err := h.Add(strings.NewReader(strings.Replace(lines(status), `"op":"x"`, `"op":"`+map[string]string{"DEAD_LETTER": "fail", "COMPLETED": "complete"}[status]+`"`, 1))); err != nil {
			t.Fatal(err)
		}
		r := history.Check(h, history.Options{Resets: resets})
		t.Log(r.Line())
		return r
	}
	hash := dedup.KeyHash("k")
	if r := check("DEAD_LETTER", nil); r.Illegal != 1 {
		t.Fatalf("a takeover of a record no call wrote passed: %s", r.Line())
	}
	if r := check("DEAD_LETTER", map[string]int{hash: 1}); !r.OK() {
		t.Fatalf("a takeover of a reset dead letter refused: %s", r.Line())
	}
	if r := check("COMPLETED", map[string]int{hash: 1}); r.Illegal != 1 {
		t.Fatalf("a reset of a COMPLETED record passed: %s", r.Line())
	}
}
