package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup/pgstore"
)

// setUpPostgres creates a run's records (with their outbox), inventory,
// orders and shipments tables in
// PostgreSQL, in the example worker's layout, with ample stock.
func setUpPostgres(ctx context.Context, pg *pgxpool.Pool) (names, error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	s := hex.EncodeToString(b)
	n := names{idem: "chaos_idem_" + s, inventory: "chaos_inv_" + s, orders: "chaos_orders_" + s, suffix: s, shipments: "chaos_ship_" + s}
	if err := pgstore.CreateTable(ctx, pg, n.idem); err != nil {
		return n, err
	}
	_, err := pg.Exec(ctx, `CREATE TABLE `+n.inventory+` (sku text PRIMARY KEY, available bigint NOT NULL, reserved bigint NOT NULL);
CREATE TABLE `+n.orders+` (order_id text PRIMARY KEY, sku text NOT NULL, qty bigint NOT NULL, reserved_at timestamptz NOT NULL);
CREATE TABLE `+n.shipments+` (order_id text PRIMARY KEY, shipped bigint NOT NULL)`)
	if err != nil {
		return n, fmt.Errorf("create the inventory and orders tables: %w", err)
	}
	if _, err := pg.Exec(ctx, `INSERT INTO `+n.inventory+` SELECT 'sku-' || i, 1000000000, 0 FROM generate_series(0, $1 - 1) AS i`, skus); err != nil {
		return n, fmt.Errorf("seed inventory: %w", err)
	}
	return n, nil
}

// pgTables are the PostgreSQL store's and the example's tables.
type pgTables struct {
	pg *pgxpool.Pool
	n  names
}

func (p pgTables) orderRows(ctx context.Context) (map[string]int, error) {
	rows, err := p.pg.Query(ctx, "SELECT order_id FROM "+p.n.orders)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		got[id]++
	}
	return got, rows.Err()
}

func (p pgTables) reserved(ctx context.Context) (map[string]int64, error) {
	rows, err := p.pg.Query(ctx, "SELECT sku, reserved FROM "+p.n.inventory)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := map[string]int64{}
	for rows.Next() {
		var sku string
		var n int64
		if err := rows.Scan(&sku, &n); err != nil {
			return nil, err
		}
		got[sku] = n
	}
	return got, rows.Err()
}

func (p pgTables) pending(ctx context.Context) ([]string, error) {
	rows, err := p.pg.Query(ctx, "SELECT encode(id, 'hex'), version, owner, attempts, takeovers, last_error, created_at, expires_at FROM "+p.n.idem+" WHERE status = 'PENDING'")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var left []string
	for rows.Next() {
		var id, owner, lastErr string
		var version int64
		var attempts, takeovers int
		var created, expires time.Time
		if err := rows.Scan(&id, &version, &owner, &attempts, &takeovers, &lastErr, &created, &expires); err != nil {
			return nil, err
		}
		left = append(left, fmt.Sprintf("id=%s version=%d owner=%s attempts=%d takeovers=%d last_error=%q created_at=%s expires_at=%s",
			id, version, owner, attempts, takeovers, lastErr, created.Format(time.RFC3339Nano), expires.Format(time.RFC3339Nano)))
	}
	return left, rows.Err()
}
