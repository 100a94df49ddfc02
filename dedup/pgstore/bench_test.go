package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/internal/testsupport/sidebyside"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

const benchSKUs = 256 // spread stock updates so transactions rarely wait on each other

// BenchmarkPostgres measures each store mode beside the minimal
// hand-written pgx client doing the same job on a table of the same
// layout, 32 operations in flight on one pool of 16 connections
// (internal/testsupport/sidebyside: interleaved rounds, median ratios):
//
//   - ClaimThenComplete: INSERT … ON CONFLICT DO UPDATE … WHERE expired
//     RETURNING, then a fenced UPDATE to COMPLETED (2 statements);
//
//   - ClaimComplete: the claim written as COMPLETED with its response
//     (1 statement);
//
//   - ClaimThenCompleteWith1Write: the same claim, then a transaction of
//     the fenced UPDATE and a conditional stock UPDATE (BEGIN, UPDATE,
//     UPDATE, COMMIT: 5 statements);
//
//   - ClaimCompleteWith1Write: one transaction of the claim written as
//     COMPLETED and the stock UPDATE (BEGIN, INSERT, UPDATE, COMMIT: 4).
//
// The minimal client writes the same record (the caller's payload hash,
// the response when it completes in the claim) and fences its UPDATE by
// owner, unique per claim; like onceq's, its claim reads nothing more
// when it wins. A counting tracer on the pool gives the statements per
// message, BEGIN and COMMIT included.
//
//	go test -run '^$' -bench '^BenchmarkPostgres$' ./dedup/pgstore/
func BenchmarkPostgres(b *testing.B) {
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16
	statements := &countingTracer{}
	cfg.ConnConfig.Tracer = statements
	p, err := pgxpool.NewWithConfig(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	ctx := b.Context()
	table, minTable, stock := uniqueName("onceq_bench"), uniqueName("onceq_bench_min"), uniqueName("stock")
	for _, t := range []string{table, minTable} {
		if err := pgstore.CreateTable(ctx, p, t); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := p.Exec(ctx, "CREATE TABLE "+stock+" (sku text PRIMARY KEY, n bigint NOT NULL); INSERT INTO "+stock+
		" SELECT 'sku-' || i, 1000000000 FROM generate_series(0, "+strconv.Itoa(benchSKUs-1)+") AS i"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE "+table+", "+minTable+", "+stock) })
	st := newStore(b, p, table)
	var seq atomic.Int64
	next := func() (string, string) {
		n := seq.Add(1)
		return "bench#" + strconv.FormatInt(n, 10), "sku-" + strconv.Itoa(int(n%benchSKUs))
	}
	now := time.Now()
	lease, keep := now.Add(time.Minute), now.Add(time.Hour)
	resp := []byte("ok")
	reserve := "UPDATE " + stock + " SET n = n - 1 WHERE sku = $1 AND n > 0"

	// The minimal client: the key's bytes as the id, a winner's version
	// returned, no read of a losing row.
	minClaim := "INSERT INTO " + minTable + ` AS r (id, status, version, owner, payload_hash, response, attempts, last_error, created_at, expires_at)
	VALUES ($1, $2, 1, $3, $4, $5, 0, '', $6, $7)
	ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, version = r.version + 1, owner = EXCLUDED.owner,
		payload_hash = EXCLUDED.payload_hash, response = EXCLUDED.response, expires_at = EXCLUDED.expires_at
	WHERE r.expires_at < $6 RETURNING version`
	minComplete := "UPDATE " + minTable + " SET status = 'COMPLETED', version = version + 1, response = $3, expires_at = $4 WHERE id = $1 AND owner = $2 AND status = 'PENDING'"
	claimMin := func(ctx context.Context, q querier, k string, status string, response []byte, until time.Time) error {
		var v int64
		return q.QueryRow(ctx, minClaim, []byte(k), status, k, "h", response, now, until).Scan(&v)
	}
	completeMin := func(ctx context.Context, q querier, k string) error {
		tag, err := q.Exec(ctx, minComplete, []byte(k), k, resp, keep)
		if err == nil && tag.RowsAffected() != 1 {
			err = errors.New("lease lost")
		}
		return err
	}

	claim := func(ctx context.Context, k string) (dedup.Lease, error) {
		c, err := st.Claim(ctx, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: k, Now: now, LeaseUntil: lease})
		if err == nil && !c.Acquired {
			err = fmt.Errorf("not acquired: %+v", c)
		}
		return c.Lease, err
	}
	modes := []struct {
		name       string
		onceq, min sidebyside.Side
	}{
		{
			name: "ClaimThenComplete",
			onceq: func(ctx context.Context) error {
				k, _ := next()
				l, err := claim(ctx, k)
				if err != nil {
					return err
				}
				return st.Complete(ctx, dedup.CompleteRequest{Lease: l, Response: resp, Now: now, ExpiresAt: keep})
			},
			min: func(ctx context.Context) error {
				k, _ := next()
				if err := claimMin(ctx, p, k, "PENDING", nil, lease); err != nil {
					return err
				}
				return completeMin(ctx, p, k)
			},
		},
		{
			name: "ClaimComplete",
			onceq: func(ctx context.Context) error {
				k, _ := next()
				c, err := st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h", Owner: k, Response: resp, Now: now, ExpiresAt: keep})
				if err == nil && !c.Acquired {
					err = fmt.Errorf("not acquired: %+v", c)
				}
				return err
			},
			min: func(ctx context.Context) error {
				k, _ := next()
				return claimMin(ctx, p, k, "COMPLETED", resp, keep)
			},
		},
		{
			name: "ClaimThenCompleteWith1Write",
			onceq: func(ctx context.Context) error {
				k, sku := next()
				l, err := claim(ctx, k)
				if err != nil {
					return err
				}
				return st.Complete(ctx, dedup.CompleteRequest{Lease: l, Response: resp, Now: now, ExpiresAt: keep,
					Writes: []dedup.Write{pgstore.Exec{SQL: reserve, Args: []any{sku}, MustAffect: true}}})
			},
			min: func(ctx context.Context) error {
				k, sku := next()
				if err := claimMin(ctx, p, k, "PENDING", nil, lease); err != nil {
					return err
				}
				return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
					if err := completeMin(ctx, tx, k); err != nil {
						return err
					}
					return reserveMin(ctx, tx, reserve, sku)
				})
			},
		},
		{
			name: "ClaimCompleteWith1Write",
			onceq: func(ctx context.Context) error {
				k, sku := next()
				c, err := st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h", Owner: k, Response: resp, Now: now, ExpiresAt: keep,
					Writes: []dedup.Write{pgstore.Exec{SQL: reserve, Args: []any{sku}, MustAffect: true}}})
				if err == nil && !c.Acquired {
					err = fmt.Errorf("not acquired: %+v", c)
				}
				return err
			},
			min: func(ctx context.Context) error {
				k, sku := next()
				return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
					if err := claimMin(ctx, tx, k, "COMPLETED", resp, keep); err != nil {
						return err
					}
					return reserveMin(ctx, tx, reserve, sku)
				})
			},
		},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) { sidebyside.Run(b, sidebyside.Options{Calls: statements.n.Load}, m.onceq, m.min) })
	}
}

// querier is a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func reserveMin(ctx context.Context, tx pgx.Tx, sql, sku string) error {
	tag, err := tx.Exec(ctx, sql, sku)
	if err == nil && tag.RowsAffected() != 1 {
		err = errors.New("out of stock")
	}
	return err
}

// countingTracer counts the statements sent through the pool's
// connections, each a round trip.
type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
