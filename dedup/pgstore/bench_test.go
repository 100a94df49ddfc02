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
	"github.com/onceq/onceq/internal/sidebyside"
	"github.com/onceq/onceq/internal/testenv"
)

const benchSKUs = 256 // spread stock updates so transactions rarely wait on each other

// BenchmarkPostgres measures each store mode beside the minimal
// hand-written pgx client doing the same job on a table of the same
// layout, 32 operations in flight on one pool of 16 connections
// (internal/sidebyside: interleaved rounds, median ratios):
//
//   - ClaimThenComplete: INSERT … ON CONFLICT DO UPDATE … WHERE expired
//     RETURNING, then a fenced UPDATE to COMPLETED (2 statements);
//
//   - ClaimThenCompleteWith1Write: the same claim, then a transaction of
//     the fenced UPDATE and a conditional stock UPDATE;
//
//   - ClaimCompleteWith1Write: one transaction of the claim written as
//     COMPLETED and the stock UPDATE.
//
//     go test -run '^$' -bench '^BenchmarkPostgres$' ./dedup/pgstore/
func BenchmarkPostgres(b *testing.B) {
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16
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
	st := pgstore.New(p, table)
	var seq atomic.Int64
	next := func() (string, string) {
		n := seq.Add(1)
		return "bench#" + strconv.FormatInt(n, 10), "sku-" + strconv.Itoa(int(n%benchSKUs))
	}
	now := time.Now()
	lease, keep := now.Add(time.Minute), now.Add(time.Hour)
	resp := []byte("ok")
	reserve := "UPDATE " + stock + " SET n = n - 1 WHERE sku = $1 AND n > 0"

	// The minimal client: the key as text, no read of the losing row.
	minClaim := "INSERT INTO " + minTable + ` AS r (id, status, version, owner, payload_hash, attempts, last_error, created_at, expires_at)
	VALUES ($1, $2, 1, $3, 'h', 1, '', $4, $5)
	ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, version = r.version + 1, owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
	WHERE r.expires_at < $4 RETURNING version`
	minComplete := "UPDATE " + minTable + " SET status = 'COMPLETED', version = version + 1, response = $3, expires_at = $4 WHERE id = $1 AND owner = $2 AND status = 'PENDING'"
	claimMin := func(ctx context.Context, q querier, k string, status string, until time.Time) error {
		var v int64
		return q.QueryRow(ctx, minClaim, []byte(k), status, k, now, until).Scan(&v)
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
				if err := claimMin(ctx, p, k, "PENDING", lease); err != nil {
					return err
				}
				return completeMin(ctx, p, k)
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
					Writes: []any{pgstore.Exec{SQL: reserve, Args: []any{sku}, MustAffect: true}}})
			},
			min: func(ctx context.Context) error {
				k, sku := next()
				if err := claimMin(ctx, p, k, "PENDING", lease); err != nil {
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
					Writes: []any{pgstore.Exec{SQL: reserve, Args: []any{sku}, MustAffect: true}}})
				if err == nil && !c.Acquired {
					err = fmt.Errorf("not acquired: %+v", c)
				}
				return err
			},
			min: func(ctx context.Context) error {
				k, sku := next()
				return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
					if err := claimMin(ctx, tx, k, "COMPLETED", keep); err != nil {
						return err
					}
					return reserveMin(ctx, tx, reserve, sku)
				})
			},
		},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) { sidebyside.Run(b, sidebyside.Options{}, m.onceq, m.min) })
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
