package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/outbox"
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

// An outbox table made by an earlier version lacks the releases column:
// the outbox's Check refuses it as a configuration fault that says what
// to run, and CreateTable run again adds the column, the entries already
// there read and leased with no release counted.
func TestOutboxWithoutReleasesUpgraded(t *testing.T) {
	p := pool(t)
	ctx := testCtx(t)
	table := recordsTable(t, p)
	ob := pgstore.OutboxTable(table)
	t.Cleanup(func() {
		_, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+ob+"; DROP SEQUENCE IF EXISTS "+pgstore.OutboxSequence(table))
	})
	s := newStore(t, p, table)
	now := time.Now().Truncate(time.Second)
	sendOnward(t, s, "old", now, outbox.Message{Destination: "q", Body: []byte("1")})
	// The layout CreateTable made before releases were counted.
	if _, err := p.Exec(ctx, "ALTER TABLE "+ob+" DROP COLUMN releases"); err != nil {
		t.Fatal(err)
	}
	o := s.Outbox().(*pgstore.Outbox)
	err := o.Check(ctx)
	if err == nil || retry.Classify(err) != retry.Misconfigured || !strings.Contains(err.Error(), "ADD COLUMN releases") ||
		!strings.Contains(err.Error(), "CreateTable") || !strings.Contains(err.Error(), ob) {
		t.Fatalf("Check of an outbox table without releases: %v (class %v), want Misconfigured naming the table and the fix", err, retry.Classify(err))
	}
	if err := pgstore.CreateTable(ctx, p, table); err != nil {
		t.Fatalf("CreateTable over the earlier outbox table: %v", err)
	}
	if err := o.Check(ctx); err != nil {
		t.Fatalf("Check after CreateTable: %v", err)
	}
	got, err := o.Lease(ctx, outbox.LeaseRequest{Owner: "r", Now: now, LeaseUntil: now.Add(time.Minute), Max: 10})
	if err != nil || len(got) != 1 || got[0].ID != outbox.ID("old", 0) || got[0].Releases != 0 || got[0].Attempts != 0 {
		t.Fatalf("earlier entry leased after the upgrade: %+v, %v", got, err)
	}
	if err := o.Release(ctx, got[0].Lease, "not sent", now, now); err != nil {
		t.Fatalf("Release after the upgrade: %v", err)
	}
}
