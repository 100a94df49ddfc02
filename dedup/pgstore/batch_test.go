package pgstore_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/dedup/storetest"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
)

// inserts are the batch cases' business writes: rows of a table of ids
// beside table, each Exec refused (a unique violation) when its id is
// already in it.
func inserts(t *testing.T, p *pgxpool.Pool, table string) func(*testing.T, dedup.Store) storetest.Inserts {
	ids := table + "_ids"
	if _, err := p.Exec(testCtx(t), "CREATE TABLE "+ids+" (id text PRIMARY KEY)"); err != nil {
		t.Fatalf("creating the ids table: %v", err)
	}
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+ids) })
	return func(*testing.T, dedup.Store) storetest.Inserts {
		return storetest.Inserts{
			Insert: func(id string) dedup.Write {
				return pgstore.Exec{SQL: "INSERT INTO " + ids + " (id) VALUES ($1)", Args: []any{id}}
			},
			Inserted: func(t *testing.T, id string) bool {
				var n int
				if err := p.QueryRow(testCtx(t), "SELECT count(*) FROM "+ids+" WHERE id = $1", id).Scan(&n); err != nil {
					t.Fatalf("reading the ids table: %v", err)
				}
				return n == 1
			},
		}
	}
}

// batchPool is a pool of one connection to the test server through a
// proxy that can lose answers, with a tracer counting round trips.
func batchPool(t *testing.T) (*pgxpool.Pool, *faultproxy.TCP, *roundTrips) {
	cfg, proxy := proxiedConfig(t)
	rt := &roundTrips{}
	cfg.ConnConfig.Tracer = rt
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db, proxy, rt
}

// proxiedConfig is a pool configuration of one connection to the test
// server through a proxy that can cut connections and lose answers.
func proxiedConfig(t *testing.T) (*pgxpool.Config, *faultproxy.TCP) {
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.NewTCP(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	host, port, _ := net.SplitHostPort(proxy.Addr())
	p, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(p), nil
	cfg.MaxConns = 1
	return cfg, proxy
}

// roundTrips counts what the pool sends: each statement alone and each
// batch (all its statements in one round trip).
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// batchKeys are n fresh keys.
func batchKeys(n int) []string {
	ks := make([]string, n)
	base := uniqueName("batch-key")
	for i := range ks {
		ks[i] = base + "-" + strconv.Itoa(i)
	}
	return ks
}

// A batch of 100 records, each with an insert and a key, commits in
// three round trips: BEGIN with the offset row's UPDATE and the keys'
// INSERT, the 100 inserts, COMMIT.
func TestBatchCommitRoundTrips(t *testing.T) {
	db, _, rt := batchPool(t)
	table := recordsTable(t, pool(t))
	ins := inserts(t, pool(t), table)(t, nil)
	bs := newStore(t, db, table).Offsets()
	ctx := testCtx(t)
	_, l := acquired(t, bs)
	now := time.Now()
	commit := func(from int64) error {
		ks := batchKeys(100)
		ws := make([]dedup.Write, len(ks))
		for i, k := range ks {
			ws[i] = ins.Insert(k)
		}
		return bs.Commit(ctx, batch.Commit{Lease: l, From: from, Next: from + 100, Writes: ws, Keys: ks, Now: now, ExpiresAt: now.Add(time.Hour)})
	}
	// The first commit prepares the statements.
	if err := commit(0); err != nil {
		t.Fatal(err)
	}
	before := rt.n.Load()
	if err := commit(100); err != nil {
		t.Fatal(err)
	}
	if n := rt.n.Load() - before; n != 3 {
		t.Fatalf("a commit of 100 records took %d round trips, want 3", n)
	}
}

// A commit whose COMMIT's answer is lost (the server committed it) is
// retried, finds the row where it moves it, and reports success; its
// writes are stored once.
func TestBatchCommitRetriedAfterLostAnswer(t *testing.T) {
	db, proxy, _ := batchPool(t)
	table := recordsTable(t, pool(t))
	ins := inserts(t, pool(t), table)(t, nil)
	var h retryHooks
	s := newStore(t, db, table, pgstore.WithHooks(&h),
		pgstore.WithRetryPolicy(retry.Policy{Initial: time.Millisecond, Max: 10 * time.Millisecond, MaxAttempts: 4}))
	bs := s.Offsets()
	ctx := testCtx(t)
	p, l := acquired(t, bs)
	now := time.Now()
	if err := bs.Commit(ctx, batch.Commit{Lease: l, From: 0, Next: 5, Now: now}); err != nil {
		t.Fatal(err)
	}
	// The write runs last: the next thing the Store sends is COMMIT.
	loseCommit := pgstore.Func(func(context.Context, pgx.Tx) error {
		proxy.LoseReplyNext(1)
		return nil
	})
	id, k := uniqueName("id"), batchKeys(1)
	err := bs.Commit(ctx, batch.Commit{Lease: l, From: 5, Next: 9, Writes: []dedup.Write{ins.Insert(id), loseCommit}, Keys: k,
		Now: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatalf("commit whose answer was lost: %v, want success", err)
	}
	if h.retries.Load() < 1 {
		t.Fatal("the lost answer was not retried")
	}
	if got, err := bs.Offset(ctx, p); err != nil || got.Next != 9 || got.Token != l.Token {
		t.Fatalf("row after the retried commit: %+v %v, want next 9 under token %d", got, err, l.Token)
	}
	if !ins.Inserted(t, id) {
		t.Fatal("the write of the commit whose answer was lost is not stored")
	}
	if r, err := s.Get(ctx, k[0]); err != nil || r.Status != dedup.StatusCompleted {
		t.Fatalf("key of the commit whose answer was lost: %+v %v", r, err)
	}
}

// retryHooks counts the batch commits retried.
type retryHooks struct{ retries atomic.Int64 }

func (h *retryHooks) OnStoreRetry(_ context.Context, op string, _ retry.Class, _ string) {
	if op == storeinstr.OpBatchCommit {
		h.retries.Add(1)
	}
}

// A business write that ends the transaction itself: a COMMIT among
// plain Execs commits the batch so far (the TxEndedError says so); a
// Func's ROLLBACK leaves nothing.
func TestBatchWriteEndingTransaction(t *testing.T) {
	p := pool(t)
	table := recordsTable(t, p)
	ins := inserts(t, p, table)(t, nil)
	bs := newStore(t, p, table).Offsets()
	ctx := testCtx(t)
	part, l := acquired(t, bs)
	now := time.Now()
	rollback := pgstore.Func(func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Conn().Exec(ctx, "ROLLBACK")
		return err
	})
	a, b := uniqueName("id"), uniqueName("id")
	err := bs.Commit(ctx, batch.Commit{Lease: l, From: 0, Next: 3, Writes: []dedup.Write{ins.Insert(a), rollback}, Now: now})
	var te *pgstore.TxEndedError
	if !errors.As(err, &te) || te.Index != 1 || te.Committed {
		t.Fatalf("commit whose Func rolled back: %v, want a *TxEndedError for write 1, not committed", err)
	}
	if ins.Inserted(t, a) {
		t.Fatal("a rolled-back batch's write is stored")
	}
	err = bs.Commit(ctx, batch.Commit{Lease: l, From: 0, Next: 3,
		Writes: []dedup.Write{ins.Insert(a), pgstore.Exec{SQL: "COMMIT"}, ins.Insert(b)}, Now: now})
	if !errors.As(err, &te) || te.Index != 1 || !te.Committed {
		t.Fatalf("commit with a COMMIT among its Execs: %v, want a *TxEndedError for write 1, committed", err)
	}
	if got, err := bs.Offset(ctx, part); err != nil || got.Next != 3 || !ins.Inserted(t, a) {
		t.Fatalf("after the write's COMMIT: row %+v %v, write before it stored %v; want next 3 and stored", got, err, ins.Inserted(t, a))
	}
}

// A records table without its offsets table (made by an earlier
// CreateTable): batch calls fail as misconfigured, naming the table.
func TestBatchMissingOffsetsTable(t *testing.T) {
	p := pool(t)
	table := recordsTable(t, p)
	if _, err := p.Exec(testCtx(t), "DROP TABLE "+pgstore.OffsetsTable(table)); err != nil {
		t.Fatal(err)
	}
	_, err := newStore(t, p, table).Offsets().Acquire(testCtx(t), batch.Partition{Group: "g", Topic: "t"}, "m")
	if retry.Classify(err) != retry.Misconfigured || !strings.Contains(err.Error(), pgstore.OffsetsTable(table)) {
		t.Fatalf("Acquire without the offsets table: %v (%v), want Misconfigured naming %s", err, retry.Classify(err), pgstore.OffsetsTable(table))
	}
	if at := testenv.EmptySegment(err.Error()); at != "" {
		t.Fatalf("Acquire without the offsets table: %q has an empty segment at %s", err, at)
	}
	if err := pgstore.CreateTable(testCtx(t), p, table); err != nil {
		t.Fatalf("CreateTable again: %v", err)
	}
	if _, err := newStore(t, p, table).Offsets().Acquire(testCtx(t), batch.Partition{Group: "g", Topic: "t"}, "m"); err != nil {
		t.Fatalf("Acquire once CreateTable ran again: %v", err)
	}
}

func TestOffsetsTableName(t *testing.T) {
	long := strings.Repeat("é", 31) + "x" // 63 bytes
	for table, want := range map[string]string{
		"":                      "onceq_records_offsets",
		"app.records":           "app.records_offsets",
		"records":               "records_offsets",
		"s." + long:             "s." + strings.Repeat("é", 27) + "_offsets",
		strings.Repeat("x", 63): strings.Repeat("x", 55) + "_offsets",
	} {
		if got := pgstore.OffsetsTable(table); got != want {
			t.Errorf("OffsetsTable(%q) = %q, want %q", table, got, want)
		}
	}
}

// plainDB is a DB with only the DB interface's methods: no SendBatch.
type plainDB struct{ pgstore.DB }

// Over a DB that sends no batches of its own, Commit begins the
// transaction alone and keeps its fence.
func TestBatchOverPlainDB(t *testing.T) {
	p := pool(t)
	table := recordsTable(t, p)
	ins := inserts(t, p, table)(t, nil)
	s := newStore(t, plainDB{p}, table)
	bs := s.Offsets()
	ctx := testCtx(t)
	part := batch.Partition{Group: uniqueName("g"), Topic: "t", Partition: 0}
	a, err := bs.Acquire(ctx, part, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := bs.Acquire(ctx, part, "b")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ids, ks := []string{uniqueName("id"), uniqueName("id")}, batchKeys(2)
	if err := bs.Commit(ctx, batch.Commit{Lease: a, From: 0, Next: 2, Writes: []dedup.Write{ins.Insert(ids[0])}, Keys: ks[:1], Now: now, ExpiresAt: now.Add(time.Hour)}); !errors.Is(err, batch.ErrFenced) {
		t.Fatalf("zombie commit: %v, want batch.ErrFenced", err)
	}
	if err := bs.Commit(ctx, batch.Commit{Lease: b, From: 0, Next: 2, Writes: []dedup.Write{ins.Insert(ids[1])}, Keys: ks[1:], Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if ins.Inserted(t, ids[0]) || !ins.Inserted(t, ids[1]) {
		t.Fatal("the zombie's write stored, or the member's not")
	}
	if _, err := s.Get(ctx, ks[0]); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("the zombie's key: %v, want absent", err)
	}
}

// acquired is a fresh partition, acquired over bs by member "m".
func acquired(t *testing.T, bs batch.Store) (batch.Partition, batch.Lease) {
	t.Helper()
	p := batch.Partition{Group: uniqueName("g"), Topic: "t", Partition: 0}
	l, err := bs.Acquire(testCtx(t), p, "m")
	if err != nil {
		t.Fatalf("Acquire %s: %v", p, err)
	}
	return p, l
}

// BenchmarkBatchCommit measures a batch of 100 records, each an INSERT,
// committed with its partition's offset row, beside the same inserts
// with no exactly-once: one statement each (autocommit), and all 100 in
// one pgx.Batch (one implicit transaction). One connection, so each
// figure is a round trip's worth of work in order.
//
//	go test -run '^$' -bench '^BenchmarkBatchCommit$' ./dedup/pgstore/
func BenchmarkBatchCommit(b *testing.B) {
	const size = 100
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 1
	p, err := pgxpool.NewWithConfig(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	ctx := b.Context()
	table, rows := uniqueName("onceq_bench"), uniqueName("onceq_bench_rows")
	if err := pgstore.CreateTable(ctx, p, table); err != nil {
		b.Fatal(err)
	}
	if _, err := p.Exec(ctx, "CREATE TABLE "+rows+" (id bigint PRIMARY KEY, body text NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_, _ = p.Exec(context.Background(), "DROP TABLE "+table+", "+pgstore.OffsetsTable(table)+", "+rows)
	})
	insert := "INSERT INTO " + rows + " (id, body) VALUES ($1, $2)"
	var id atomic.Int64
	perMessage := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/msg")
		b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "msgs/s")
	}
	b.Run("batch", func(b *testing.B) {
		bs := newStore(b, p, table).Offsets()
		part := batch.Partition{Group: uniqueName("g"), Topic: "t"}
		l, err := bs.Acquire(ctx, part, "m")
		if err != nil {
			b.Fatal(err)
		}
		next := int64(0)
		for b.Loop() {
			ws := make([]dedup.Write, size)
			for i := range ws {
				ws[i] = pgstore.Exec{SQL: insert, Args: []any{id.Add(1), "body"}}
			}
			if err := bs.Commit(ctx, batch.Commit{Lease: l, From: next, Next: next + size, Writes: ws, Now: time.Now()}); err != nil {
				b.Fatal(err)
			}
			next += size
		}
		perMessage(b)
	})
	b.Run("raw-autocommit", func(b *testing.B) {
		for b.Loop() {
			for range size {
				if _, err := p.Exec(ctx, insert, id.Add(1), "body"); err != nil {
					b.Fatal(err)
				}
			}
		}
		perMessage(b)
	})
	b.Run("raw-pipelined", func(b *testing.B) {
		for b.Loop() {
			var q pgx.Batch
			for range size {
				q.Queue(insert, id.Add(1), "body")
			}
			if err := p.SendBatch(ctx, &q).Close(); err != nil {
				b.Fatal(err)
			}
		}
		perMessage(b)
	})
}
