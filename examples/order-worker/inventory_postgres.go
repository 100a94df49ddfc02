package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
)

// pgInventory reserves stock in PostgreSQL tables. Its writes are
// statements that dedup/pgstore runs in the transaction that writes the
// COMPLETED record.
type pgInventory struct {
	inventory, orders string // quoted names
}

func newPGInventory(inventory, orders string) *pgInventory {
	return &pgInventory{inventory: pgQuote(inventory), orders: pgQuote(orders)}
}

// Reserve takes the quantity only while enough is available (the
// statement's WHERE is its condition) and puts the order row, whose
// primary key refuses a second one.
func (p *pgInventory) Reserve(o Order) []dedup.Write {
	return []dedup.Write{
		pgstore.Exec{SQL: "UPDATE " + p.inventory + " SET available = available - $2, reserved = reserved + $2 WHERE sku = $1 AND available >= $2",
			Args: []any{o.SKU, o.Qty}, MustAffect: true},
		pgstore.Exec{SQL: "INSERT INTO " + p.orders + " (order_id, sku, qty, reserved_at) VALUES ($1, $2, $3, now())",
			Args: []any{o.OrderID, o.SKU, o.Qty}},
	}
}

// create makes the inventory and orders tables when missing and seeds
// skus sku-0 … sku-{skus-1} where absent.
func (p *pgInventory) create(ctx context.Context, pool *pgxpool.Pool, skus int, available int64) error {
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+p.inventory+` (sku text PRIMARY KEY, available bigint NOT NULL, reserved bigint NOT NULL);
CREATE TABLE IF NOT EXISTS `+p.orders+` (order_id text PRIMARY KEY, sku text NOT NULL, qty bigint NOT NULL, reserved_at timestamptz NOT NULL)`)
	if err != nil {
		return fmt.Errorf("create the example's tables: %w", err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO `+p.inventory+` SELECT 'sku-' || i, $1, 0 FROM generate_series(0, $2 - 1) AS i ON CONFLICT DO NOTHING`, available, skus)
	if err != nil {
		return fmt.Errorf("seed %s: %w", p.inventory, err)
	}
	return nil
}

// check proves both tables exist and can be read: the store's check
// covers only the records table.
func (p *pgInventory) check(ctx context.Context, pool *pgxpool.Pool) error {
	for _, t := range []string{p.inventory, p.orders} {
		if _, err := pool.Exec(ctx, "SELECT FROM "+t+" WHERE false"); err != nil {
			return fmt.Errorf("table %s: %w (create it with -create-tables)", t, err)
		}
	}
	return nil
}

// totals reads reserved units and order rows.
func (p *pgInventory) totals(ctx context.Context, pool *pgxpool.Pool) (reserved int64, rows int, err error) {
	err = pool.QueryRow(ctx, "SELECT (SELECT coalesce(sum(reserved), 0) FROM "+p.inventory+"), (SELECT count(*) FROM "+p.orders+")").Scan(&reserved, &rows)
	return reserved, rows, err
}

func pgQuote(name string) string { return pgx.Identifier{name}.Sanitize() }
