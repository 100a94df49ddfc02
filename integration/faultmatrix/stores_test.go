package faultmatrix_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/dedup/redisstore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
)

// The cases of the PostgreSQL and Redis stores: the SQS source as in the
// DynamoDB cases, the store's server behind a TCP proxy that can cut it.
func init() {
	cases = append(cases,
		matrixCase{name: "postgres-missing-table", run: postgresMissingTable},
		matrixCase{name: "postgres-down-30s", run: postgresDown, slow: true},
		matrixCase{name: "redis-acl-denied", run: redisDenied},
		matrixCase{name: "redis-down-30s", run: redisDown, slow: true},
	)
}

// outage is the store's server down for this long mid-run: longer than
// the consumer retries a store call in place (20 s), so the messages are
// held and given the StoreUnavailable outcome, as in dynamodb-down-30s.
const outage = 30 * time.Second

// cutProxy forwards TCP connections to a server until cut, which closes
// every connection and refuses new ones until mend.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[s] = true, true
		p.wg.Add(2)
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pipe(s, c)
		go pipe(c, s)
	}
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *cutProxy) mend() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// pgWorld is a case's PostgreSQL: a records table name, a ledger table
// (one row per key: a second effect breaks its primary key and shows as a
// rejected outcome) and pools straight to the server and through proxy.
type pgWorld struct {
	direct, proxied *pgxpool.Pool
	proxy           *cutProxy
	idem, ledger    string
}

func newPGWorld(t *testing.T, f *fixture) *pgWorld {
	u, err := url.Parse(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	w := &pgWorld{idem: "fm_idem_" + f.suffix, ledger: "fm_ledger_" + f.suffix, proxy: startCutProxy(t, u.Host)}
	w.direct = pgPool(t, u.String())
	u.Host = w.proxy.addr()
	w.proxied = pgPool(t, u.String())
	if _, err := w.direct.Exec(context.Background(), "CREATE TABLE "+w.ledger+" (k text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = w.direct.Exec(context.Background(), "DROP TABLE IF EXISTS "+w.ledger+", "+w.idem) })
	f.effectsIn = func(t *testing.T) map[string]int {
		rows, err := w.direct.Query(context.Background(), "SELECT k FROM "+w.ledger)
		if err != nil {
			t.Fatalf("read %s: %v", w.ledger, err)
		}
		defer rows.Close()
		got := map[string]int{}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			got[k]++
		}
		return got
	}
	return w
}

func pgPool(t *testing.T, u string) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func (w *pgWorld) createRecords(t *testing.T) {
	if err := pgstore.CreateTable(context.Background(), w.direct, w.idem); err != nil {
		t.Fatal(err)
	}
}

// handler is the order handler with its ledger row in PostgreSQL,
// committed with COMPLETED.
func (w *pgWorld) handler(f *fixture, before func() error) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		key := m.Attributes[consumer.IdempotencyKeyAttribute]
		f.rec.ran(key)
		if before != nil {
			if err := before(); err != nil {
				return consumer.Result{}, err
			}
		}
		return consumer.Result{Response: []byte(`{"status":"booked"}`), RejectResponse: []byte(`{"status":"doubled"}`),
			Writes: []dedup.Write{pgstore.Exec{SQL: "INSERT INTO " + w.ledger + " (k) VALUES ($1)", Args: []any{key}}}}, nil
	})
}

// startsMisconfigured checks Run's answer to a deployment fault found at
// start, and that the message was never received.
func startsMisconfigured(t *testing.T, f *fixture, err error, want func(error) bool) {
	t.Helper()
	if !errors.Is(err, consumer.ErrMisconfigured) || !want(err) {
		t.Fatalf("Run = %v; want ErrMisconfigured naming the cause", err)
	}
	if v, i, d := f.messages(f.queue); v != 1 || i+d != 0 {
		t.Fatalf("queue: %d visible, %d in flight, %d delayed; want the one message visible, never received", v, i, d)
	}
}

// The records table missing: Run's check stops it before any receive
// (SQLSTATE 42P01); once the table exists the message is processed on
// its first delivery.
func postgresMissingTable(t *testing.T, f *fixture) string {
	w := newPGWorld(t, f)
	f.queues(0, true)
	f.send("order-1")
	first := f.start("first", w.store(t, w.direct), w.handler(f, nil))
	startsMisconfigured(t, f, first.wait(t, 30*time.Second), func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "42P01"
	})
	w.createRecords(t)
	after := f.start("after-fix", w.store(t, w.direct), w.handler(f, nil))
	f.waitEffects(t, 30*time.Second)
	if err := after.stop(); err != nil {
		t.Fatalf("Run after the fix: %v", err)
	}
	if d, _ := f.rec.deliveryStats(); d != 1 {
		t.Fatalf("processed on delivery %d; want 1", d)
	}
	return "Run: ErrMisconfigured (42P01) before any receive; after CreateTable processed on its first delivery"
}

// downMidRun sends 100 messages, cuts the store's server once 20 are
// done, mends it after the outage, and checks that Run held the messages
// through it and processed every one.
func downMidRun(t *testing.T, f *fixture, p *cutProxy, store dedup.Store, h func(before func() error) consumer.Handler) string {
	f.queues(0, true)
	f.send(keys("order", 100)...)
	slow := func() error { time.Sleep(50 * time.Millisecond); return nil } // some handlers are mid-run when it goes
	counted := &failCounter{Store: store}
	// The lease outlasts the outage by a margin a loaded machine cannot
	// eat (the commit is retried for two thirds of it, less the skew
	// margin): a handler done before the outage commits when it ends.
	w := f.start("worker", counted, h(slow), consumer.Concurrency(8), consumer.LeaseTTL(outage*3))
	waitFor(t, 30*time.Second, func() string {
		if n := f.rec.count(consumer.Processed); n < 20 {
			return fmt.Sprintf("%d processed before the outage, want 20", n)
		}
		return ""
	})
	p.cut()
	before := len(f.effects(t))
	time.Sleep(outage)
	if w.stopped() {
		t.Fatalf("Run stopped during the outage: %v", w.err)
	}
	p.mend()
	// A claim whose answer the outage lost holds its key for the lease.
	f.waitEffects(t, outage*3+60*time.Second)
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// A handler done before the outage may only wait for its Complete, which
	// the consumer retries while the lease lasts: the outage shows as
	// failed store calls, and as StoreUnavailable outcomes where claims met it.
	if counted.failed.Load() == 0 {
		t.Fatalf("outcomes %q: no store call failed; the outage was not seen", f.rec.kinds())
	}
	_, again := f.rec.runStats()
	return fmt.Sprintf("%d of 100 done before the outage; held through it (%d store calls failed; %s); Run never stopped; handlers run again for %d messages",
		before, counted.failed.Load(), f.rec.kinds(), again)
}

// failCounter counts the store calls that failed.
type failCounter struct {
	dedup.Store
	failed atomic.Int64
}

func (s *failCounter) count(err error) error {
	if err != nil {
		s.failed.Add(1)
	}
	return err
}

func (s *failCounter) Claim(ctx context.Context, r dedup.ClaimRequest) (dedup.Claim, error) {
	c, err := s.Store.Claim(ctx, r)
	return c, s.count(err)
}

func (s *failCounter) Complete(ctx context.Context, r dedup.CompleteRequest) error {
	return s.count(s.Store.Complete(ctx, r))
}

// store is a pgstore.Store over the world's records table on db.
func (w *pgWorld) store(t *testing.T, db pgstore.DB) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(db, pgstore.WithTable(w.idem))
	if err != nil {
		t.Fatalf("pgstore.New: %v", err)
	}
	return s
}

// PostgreSQL unreachable mid-run (every connection cut, new ones
// refused): messages held, none dead-lettered, each processed once after.
func postgresDown(t *testing.T, f *fixture) string {
	w := newPGWorld(t, f)
	w.createRecords(t)
	return downMidRun(t, f, w.proxy, w.store(t, w.proxied), func(before func() error) consumer.Handler { return w.handler(f, before) })
}

// redisLedger is a Redis case's effects: Redis commits no business
// writes, so the handler's effect is its own, counted here per key.
type redisLedger struct {
	mu  sync.Mutex
	got map[string]int
}

func redisHandler(f *fixture, l *redisLedger, before func() error) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		key := m.Attributes[consumer.IdempotencyKeyAttribute]
		f.rec.ran(key)
		if before != nil {
			if err := before(); err != nil {
				return consumer.Result{}, err
			}
		}
		l.mu.Lock()
		l.got[key]++
		l.mu.Unlock()
		return consumer.Result{Response: []byte(`{"status":"booked"}`)}, nil
	})
}

func newRedisLedger(f *fixture) *redisLedger {
	l := &redisLedger{got: map[string]int{}}
	f.effectsIn = func(*testing.T) map[string]int {
		l.mu.Lock()
		defer l.mu.Unlock()
		out := make(map[string]int, len(l.got))
		for k, v := range l.got {
			out[k] = v
		}
		return out
	}
	return l
}

func redisClient(t *testing.T, o *redis.Options) *redis.Client {
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A Redis user the ACL denies scripts: Run's check stops it before any
// receive (NOPERM, Misconfigured); once allowed the message is processed
// on its first delivery.
func redisDenied(t *testing.T, f *fixture) string {
	addr := testenv.RedisAddr(t)
	admin := redisClient(t, &redis.Options{Addr: addr})
	user := "fm_" + f.suffix
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", "nopass", "~*", "-@all", "+ping").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	store, err := redisstore.New(redisClient(t, &redis.Options{Addr: addr, Username: user, Password: "any"}), redisstore.Prefix("fm:"+f.suffix+":"))
	if err != nil {
		t.Fatal(err)
	}
	l := newRedisLedger(f)
	f.queues(0, true)
	f.send("order-1")
	first := f.start("first", store, redisHandler(f, l, nil))
	startsMisconfigured(t, f, first.wait(t, 30*time.Second), func(err error) bool { return retry.Classify(err) == retry.Misconfigured })
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	after := f.start("after-fix", store, redisHandler(f, l, nil))
	f.waitEffects(t, 30*time.Second)
	if err := after.stop(); err != nil {
		t.Fatalf("Run after the fix: %v", err)
	}
	return "Run: ErrMisconfigured (NOPERM) before any receive; after the ACL allowed it processed"
}

// Redis unreachable mid-run: as for PostgreSQL.
func redisDown(t *testing.T, f *fixture) string {
	p := startCutProxy(t, testenv.RedisAddr(t))
	store, err := redisstore.New(redisClient(t, &redis.Options{Addr: p.addr(), DialTimeout: 2 * time.Second, MaxRetries: -1}),
		redisstore.Prefix("fm:"+f.suffix+":"))
	if err != nil {
		t.Fatal(err)
	}
	l := newRedisLedger(f)
	return downMidRun(t, f, p, store, func(before func() error) consumer.Handler { return redisHandler(f, l, before) })
}
