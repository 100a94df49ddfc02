package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/retry"
)

// A table made by an earlier version lacks the takeovers column: Check
// refuses it as a configuration fault that says what to run, and
// CreateTable run again adds the column, the rows already there read with
// no takeover counted and their leases still taken over and counted.
func TestTableWithoutTakeoversUpgraded(t *testing.T) {
	p := pool(t)
	ctx := testCtx(t)
	name := uniqueName("onceq_test_old")
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+name) })
	// The layout CreateTable made before takeovers were counted.
	if _, err := p.Exec(ctx, `CREATE TABLE `+name+` (
	id bytea PRIMARY KEY, status text NOT NULL, version bigint NOT NULL, owner text NOT NULL,
	payload_hash text NOT NULL, response bytea, attempts integer NOT NULL, last_error text NOT NULL,
	created_at timestamptz NOT NULL, expires_at timestamptz NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	// A lease an earlier worker held, abandoned since.
	if _, err := p.Exec(ctx, `INSERT INTO `+name+` VALUES ('\x006f6c64'::bytea, 'PENDING', 3, 'old-owner', 'h', NULL, 1, '', $1, $2)`,
		now.Add(-time.Hour), now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, p, name)
	err := s.Check(ctx)
	if err == nil || retry.Classify(err) != retry.Misconfigured || !strings.Contains(err.Error(), "ADD COLUMN takeovers") ||
		!strings.Contains(err.Error(), "CreateTable") || !strings.Contains(err.Error(), name) {
		t.Fatalf("Check of a table without takeovers: %v (class %v), want Misconfigured naming the table and the fix", err, retry.Classify(err))
	}
	if err := pgstore.CreateTable(ctx, p, name); err != nil {
		t.Fatalf("CreateTable over the earlier table: %v", err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check after CreateTable: %v", err)
	}
	if r, err := s.Get(ctx, "old"); err != nil || r.Takeovers != 0 || r.Attempts != 1 || r.Owner != "old-owner" {
		t.Fatalf("earlier row after the upgrade: %+v, %v", r, err)
	}
	c, err := s.Claim(ctx, dedup.ClaimRequest{Key: "old", Owner: "new", PayloadHash: "h", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !c.Acquired || c.Takeovers != 1 || c.Attempt != 2 {
		t.Fatalf("takeover of the earlier row's abandoned lease: %+v, %v; want acquired, 1 takeover, attempt 2", c, err)
	}
	if err := pgstore.CreateTable(ctx, p, name); err != nil {
		t.Fatalf("CreateTable again: %v", err)
	}
}
