package consumer_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/memsource"
)

// logLine is one recorded log record: its level, message and attributes.
type logLine struct {
	level slog.Level
	msg   string
	attrs map[string]slog.Value
}

// logRecorder is a slog.Handler that keeps every record, and wakes those
// waiting for a message.
type logRecorder struct {
	mu    sync.Mutex
	cond  *sync.Cond
	lines []logLine
}

func newLogRecorder() *logRecorder {
	l := &logRecorder{}
	l.cond = sync.NewCond(&l.mu)
	return l
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	line := logLine{level: r.Level, msg: r.Message, attrs: map[string]slog.Value{}}
	r.Attrs(func(a slog.Attr) bool {
		line.attrs[a.Key] = a.Value.Resolve()
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.cond.Broadcast()
	l.mu.Unlock()
	return nil
}

// with is the lines whose message begins with prefix.
func (l *logRecorder) with(prefix string) []logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logLine
	for _, line := range l.lines {
		if strings.HasPrefix(line.msg, prefix) {
			out = append(out, line)
		}
	}
	return out
}

// await blocks until a line whose message begins with prefix is logged.
func (l *logRecorder) await(prefix string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		for _, line := range l.lines {
			if strings.HasPrefix(line.msg, prefix) {
				return
			}
		}
		l.cond.Wait()
	}
}

// noKeyIn fails t if any recorded line carries key in its message or an
// attribute.
func (l *logRecorder) noKeyIn(t *testing.T, key string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line.msg, key) {
			t.Fatalf("log line %q carries the key", line.msg)
		}
		for k, v := range line.attrs {
			if strings.Contains(v.String(), key) {
				t.Fatalf("log line %q: attribute %s carries the key: %v", line.msg, k, v)
			}
		}
	}
}

// runInBubble starts c.Run and returns a stop that cancels it and checks
// it returned nil.
func runInBubble(t *testing.T, c *consumer.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-errc; err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
}

// newRecorded is consumer.New with a logRecorder for its logger.
func newRecorded(t *testing.T, src consumer.Source, store dedup.Store, h consumer.Handler, opts ...consumer.Option) (*consumer.Consumer, *logRecorder) {
	t.Helper()
	logs := newLogRecorder()
	c, err := consumer.New(src, store, h, append(opts, consumer.WithLogger(slog.New(logs)))...)
	if err != nil {
		t.Fatal(err)
	}
	return c, logs
}

// holdElsewhere claims key in store for another worker, for a minute
// from now, which it returns.
func holdElsewhere(t *testing.T, store dedup.Store, key string) time.Time {
	t.Helper()
	now := time.Now()
	if _, err := store.Claim(t.Context(), dedup.ClaimRequest{Key: "onceq#" + key, Owner: "elsewhere", Now: now,
		LeaseUntil: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	return now
}

// sendKeyed sends a message with key as its idempotency key.
func sendKeyed(t *testing.T, q *memsource.Queue, key string) {
	_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte(key), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: key}})
}

// outageStore is a store whose first n claims fail as against an
// unreachable store.
func outageStore(t testing.TB, n int32) *failingStore {
	s := &failingStore{Store: memstoretest.New(t), claimErr: apiError{"InternalServerError"}}
	s.failures.Store(n)
	return s
}

// While the first Receive has not returned (a Kafka source joining its
// group), the consumer says so after 10s and then at doubling intervals
// up to 30s, with the time spent, naming the source; once the source
// answers it says that once, with the whole wait.
func TestWaitForTheSourceLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		c, logs := newRecorded(t, q.Source(), memstoretest.New(t), noopHandler())
		stop := runInBubble(t, c)
		time.Sleep(35 * time.Second)
		synctest.Wait()
		waits := logs.with("waiting for the source")
		if len(waits) != 2 {
			t.Fatalf("%d lines waiting for the source in 35s, want 2 (at 10s and 30s)", len(waits))
		}
		for i, want := range []time.Duration{10 * time.Second, 30 * time.Second} {
			if got := waits[i].attrs["waited"].Duration(); got != want {
				t.Fatalf("line %d: waited %v, want %v", i, got, want)
			}
			if src := waits[i].attrs["source"].String(); src != "*memsource.Source" {
				t.Fatalf("line %d: source %q, want the Source's type", i, src)
			}
		}
		if len(logs.with("receiving from the source")) != 0 {
			t.Fatal("receiving logged before the source answered")
		}
		time.Sleep(100 * time.Second) // 135s in
		synctest.Wait()
		waits = logs.with("waiting for the source")
		for i, want := range []time.Duration{10, 30, 60, 90, 120} {
			if i >= len(waits) || waits[i].attrs["waited"].Duration() != want*time.Second {
				t.Fatalf("waiting lines %+v: want one at 10s, 30s and every 30s after", waits)
			}
		}
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("order")})
		synctest.Wait()
		got := logs.with("receiving from the source")
		if len(got) != 1 || got[0].attrs["waited"].Duration() != 135*time.Second {
			t.Fatalf("receiving lines %+v, want one with waited 135s", got)
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if n := len(logs.with("waiting for the source")); n != 5 {
			t.Fatalf("%d waiting lines after the source answered, want still 5", n)
		}
		stop()
	})
}

// A message whose key another worker holds is logged once per lease of
// the holder, with the time until that lease can be taken over and the
// key's hash, not the key: not once per recheck, nor again when it is
// given back to the source.
func TestKeyWaitLoggedOncePerLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const key = "order-secret-42"
		store := memstoretest.New(t)
		now := holdElsewhere(t, store, key)
		q := memsourcetest.NewQueue(t, "orders")
		sendKeyed(t, q, key)
		c, logs := newRecorded(t, q.Source(), store, noopHandler(), consumer.WithoutPayloadCheck())
		stop := runInBubble(t, c)
		// Rechecked in place every 2s for HandlerTimeout (30s), then given
		// back until the lease (60s) and the skew margin (5s) have passed;
		// then taken over.
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if st := q.Stats(); st.Acked != 1 {
			t.Fatalf("queue %+v: want the message taken over and acked", st)
		}
		waits := logs.with("waiting behind another worker's lease")
		if len(waits) != 1 {
			t.Fatalf("%d lines waiting behind the lease, want 1 for the whole lease", len(waits))
		}
		w := waits[0]
		if got := w.attrs["key_hash"].String(); got != dedup.KeyHash("onceq#"+key) {
			t.Fatalf("key_hash %q, want the hash of the namespaced key", got)
		}
		// The bubble starts on a whole second: the lease ends then and is
		// claimable by every store a second later, and past the skew margin.
		if got, want := w.attrs["lease_ends_in"].Duration(), dedup.ClaimableAt(now.Add(time.Minute)).Add(consumer.DefaultClockSkewMargin).Sub(now); got != want {
			t.Fatalf("lease_ends_in %v, want until the lease is claimable past the skew margin, %v", got, want)
		}
		if !w.attrs["held_in_place"].Bool() {
			t.Fatal("held_in_place false: the first wait is held in place")
		}
		logs.noKeyIn(t, key)
		stop()
	})
}

// A store outage is said when the first message is held for it, with the
// error, the next retry and its delay, at most every 30s while it lasts;
// and once when the store answers again, with how long it was out.
func TestStoreOutageLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("order")})
		store := outageStore(t, 4) // retried after 1s, 2s, 4s, 8s
		c, logs := newRecorded(t, q.Source(), store, noopHandler(), consumer.FailedRetryDelay(time.Second))
		stop := runInBubble(t, c)
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if h := c.Health(); h.StoreReachable || h.Ready || !h.Live || h.StoreUnavailableSince.IsZero() {
			t.Fatalf("health in the outage %+v: want the store unreachable, not ready, live", h)
		}
		down := logs.with("store unavailable")
		if len(down) != 1 || down[0].level != slog.LevelWarn {
			t.Fatalf("outage lines %+v, want one warning", down)
		}
		d := down[0].attrs
		if !strings.Contains(d["error"].String(), "InternalServerError") || d["retry_in"].Duration() != time.Second ||
			d["next_retry"].Time().IsZero() || d["failed_calls"].Int64() != 1 {
			t.Fatalf("outage line %v: want the error, retry_in 1s, the next retry, failed_calls 1", d)
		}
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if st := q.Stats(); st.Acked != 1 {
			t.Fatalf("queue %+v: want the message acked once the store is back", st)
		}
		if n := len(logs.with("store unavailable")); n != 1 {
			t.Fatalf("%d outage lines in a 15s outage, want 1", n)
		}
		back := logs.with("store reachable again")
		if len(back) != 1 || back[0].attrs["failed_calls"].Int64() != 4 || back[0].attrs["unavailable_for"].Duration() != 15*time.Second {
			t.Fatalf("reachable lines %+v, want one after 4 failed calls and 15s", back)
		}
		if h := c.Health(); !h.StoreReachable || !h.Ready {
			t.Fatalf("health after the outage %+v: want the store reachable, ready", h)
		}
		stop()
	})
}

// An outage longer than 30s is said again while it lasts, however far
// apart its retries: no two lines about it, nor its last line and now,
// are more than 30s apart.
func TestLongStoreOutageSaidAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("order")})
		c, logs := newRecorded(t, q.Source(), outageStore(t, 1<<30), noopHandler(), consumer.FailedRetryDelay(time.Second))
		stop := runInBubble(t, c)
		// Retries at 1s, 3s, 7s, 15s, 31s, 63s, 127s: more than 30s apart
		// from the fifth on.
		time.Sleep(200 * time.Second)
		synctest.Wait()
		down := logs.with("store unavailable")
		var at []time.Duration
		for _, d := range down {
			at = append(at, d.attrs["unavailable_for"].Duration())
		}
		if len(at) == 0 || at[0] != 0 {
			t.Fatalf("outage lines at %v into the outage, want the first at once", at)
		}
		at = append(at, 200*time.Second)
		for i := 1; i < len(at); i++ {
			if gap := at[i] - at[i-1]; gap > 30*time.Second {
				t.Fatalf("outage lines at %v into the outage (then now, 200s): a gap of %v, want none over 30s", at[:len(at)-1], gap)
			}
		}
		for _, d := range down {
			if !strings.Contains(d.attrs["error"].String(), "InternalServerError") {
				t.Fatalf("outage line %v: want the store's error", d.attrs)
			}
		}
		stop()
	})
}

// With WithProgressLog, each interval gets one line: what was processed,
// answered as a duplicate, dead-lettered, in that interval.
func TestProgressLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		for _, body := range []string{"a", "a", "poison"} {
			_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte(body)})
		}
		h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
			if string(m.Body) == "poison" {
				return consumer.Result{}, errors.Join(consumer.ErrPermanent, errors.New("poison"))
			}
			return consumer.Result{}, nil
		})
		c, logs := newRecorded(t, q.Source(), memstoretest.New(t), h, consumer.Concurrency(1), consumer.WithProgressLog(10*time.Second))
		stop := runInBubble(t, c)
		time.Sleep(25 * time.Second)
		synctest.Wait()
		lines := logs.with("progress")
		if len(lines) != 2 {
			t.Fatalf("%d progress lines in 25s at 10s, want 2", len(lines))
		}
		want := []map[string]int64{
			{"processed": 1, "duplicates": 1, "dead_lettered": 1, "retried": 0, "in_flight": 0},
			{"processed": 0, "duplicates": 0, "dead_lettered": 0, "retried": 0, "in_flight": 0},
		}
		for i, w := range want {
			for k, n := range w {
				if got := lines[i].attrs[k].Int64(); got != n {
					t.Fatalf("progress line %d: %s %d, want %d (%v)", i, k, got, n, lines[i].attrs)
				}
			}
			if got := lines[i].attrs["interval"].Duration(); got != 10*time.Second {
				t.Fatalf("progress line %d: interval %v, want 10s", i, got)
			}
		}
		stop()
	})
}

// Without WithProgressLog there is no progress line.
func TestNoProgressLogByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := memsourcetest.NewQueue(t, "orders")
		_ = q.Send(t.Context(), memsource.Outgoing{Body: []byte("a")})
		c, logs := newRecorded(t, q.Source(), memstoretest.New(t), noopHandler())
		stop := runInBubble(t, c)
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(logs.with("progress")); n != 0 {
			t.Fatalf("%d progress lines without WithProgressLog", n)
		}
		stop()
	})
}

// After a crash every key the dead worker held waits at once: at most 10
// lines in 10s say so, and the next line counts the waits left unsaid.
func TestKeyWaitStormBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstoretest.New(t)
		q := memsourcetest.NewQueue(t, "orders")
		for i := range 15 {
			key := "k" + strconv.Itoa(i)
			holdElsewhere(t, store, key)
			sendKeyed(t, q, key)
		}
		c, logs := newRecorded(t, q.Source(), store, noopHandler(), consumer.WithoutPayloadCheck())
		stop := runInBubble(t, c)
		time.Sleep(time.Second)
		synctest.Wait()
		const line = "waiting behind another worker's lease"
		if n := len(logs.with(line)); n != 10 {
			t.Fatalf("%d lines for 15 keys waiting at once, want 10", n)
		}
		time.Sleep(10 * time.Second)
		holdElsewhere(t, store, "late")
		sendKeyed(t, q, "late")
		synctest.Wait()
		waits := logs.with(line)
		if len(waits) != 11 || waits[10].attrs["unlogged_waits"].Int64() != 5 {
			t.Fatalf("%d lines, the last %v: want an 11th counting the 5 left unsaid", len(waits), waits[len(waits)-1].attrs)
		}
		stop()
	})
}
