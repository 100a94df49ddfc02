package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
)

// base is a last part of n bytes: ASCII, or two-byte characters with an
// ASCII byte where n is odd.
func base(n int, wide bool) string {
	if !wide {
		return strings.Repeat("n", n)
	}
	return strings.Repeat("é", n/2) + strings.Repeat("x", n%2)
}

// Every name derived from a records table of 1 to 63 bytes fits
// PostgreSQL's 63 bytes, is distinct from the others, and is the name an
// earlier version made wherever that one named what it meant to.
func TestDerivedNamesFit(t *testing.T) {
	for _, wide := range []bool{false, true} {
		for l := 1; l <= maxIdentifier; l++ {
			b := base(l, wide)
			for _, table := range []string{b, "app." + b} {
				n := namesOf(table)
				all := n.all()
				for _, name := range all {
					if name == "" || len(name) > maxIdentifier {
						t.Errorf("table %q (%d bytes): derived name %q of %d bytes", table, l, name, len(name))
					}
				}
				sorted := slices.Clone(all)
				slices.Sort(sorted)
				if len(slices.Compact(sorted)) != len(all) {
					t.Errorf("table %q (%d bytes): derived names %q are not distinct", table, l, all)
				}
				if OutboxTable(table) != n.schema+n.outbox || OutboxSequence(table) != n.schema+n.outboxSeq || OffsetsTable(table) != n.schema+n.offsets {
					t.Errorf("table %q: exported names differ from those CreateTable makes", table)
				}
				// What earlier versions made, where it was right.
				if n.outbox != clip(b+"_outbox") && len(b)+len("_outbox") <= maxIdentifier {
					t.Errorf("table %q: outbox table %q changed", table, n.outbox)
				}
				if old := clip(n.outbox + "_seq"); old != n.outbox && n.outboxSeq != old {
					t.Errorf("table %q: sequence %q, earlier %q", table, n.outboxSeq, old)
				}
				for suffix, idx := range map[string]string{"_pending_idx": n.outboxPendingIdx, "_lane_idx": n.outboxLaneIdx, "_expires_idx": n.outboxExpiresIdx, "_unordered_idx": n.outboxUnorderedIdx} {
					if idx != fitName(n.outbox, suffix) {
						t.Errorf("table %q: outbox index %q changed", table, idx)
					}
				}
				if old := clip(b + "_expires_at_idx"); old != b && n.recordsExpiresIdx != old {
					t.Errorf("table %q: expiry index %q, earlier %q", table, n.recordsExpiresIdx, old)
				}
			}
		}
	}
}

// At each length where a derived name changes form, a table made by
// CreateTable has every derived relation, of its kind, and takes a commit
// with an outgoing message and a batch commit: no name is cut by
// PostgreSQL into another's.
func TestDerivedNamesOnServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := pgxpool.New(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// A schema of the test's own, so that short names are unique.
	r := make([]byte, 6)
	_, _ = rand.Read(r)
	schema := "onceq_names_" + hex.EncodeToString(r)
	if _, err := p.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	type tc struct {
		l    int
		wide bool
	}
	cases := []tc{{1, false}, {48, false}, {49, false}, {52, false}, {53, false}, {55, false}, {56, false}, {57, false}, {62, false}, {63, false}, {63, true}, {56, true}}
	for _, c := range cases {
		table := schema + "." + base(c.l, c.wide)
		if err := CreateTable(ctx, p, table); err != nil {
			t.Fatalf("CreateTable of a %d-byte name: %v", c.l, err)
		}
		n := namesOf(table)
		for name, kind := range map[string]string{n.records: "r", n.recordsExpiresIdx: "i", n.outbox: "r", n.outboxSeq: "S",
			n.outboxPendingIdx: "i", n.outboxLaneIdx: "i", n.outboxExpiresIdx: "i", n.outboxUnorderedIdx: "i", n.offsets: "r"} {
			var got string
			err := p.QueryRow(ctx, `SELECT c.relkind::text FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
				WHERE s.nspname = $1 AND c.relname = $2`, schema, name).Scan(&got)
			if err != nil || got != kind {
				t.Errorf("table of a %d-byte name: relation %q: kind %q, %v; want %q", c.l, name, got, err, kind)
			}
		}
		s, err := New(p, WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Check(ctx); err != nil {
			t.Errorf("Check of a %d-byte name: %v", c.l, err)
		}
		if err := s.outbox.Check(ctx); err != nil {
			t.Errorf("the outbox's Check of a %d-byte name: %v", c.l, err)
		}
		now := time.Now()
		cl, err := s.Claim(ctx, dedup.ClaimRequest{Key: "k", Owner: "w", Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		err = s.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: now, ExpiresAt: now.Add(time.Hour),
			Outbox: []outbox.Message{{Destination: "d", Body: []byte("b")}}})
		if err != nil {
			t.Errorf("a commit with an outgoing message, table of a %d-byte name: %v", c.l, err)
			continue
		}
		if es, err := s.Outbox().Entries(ctx, outbox.Pending, 0); err != nil || len(es) != 1 {
			t.Errorf("outbox of a %d-byte name: %d entries, %v", c.l, len(es), err)
		}
		if _, err := s.Offsets().Acquire(ctx, batch.Partition{Group: "g", Topic: "t"}, "m"); err != nil {
			t.Errorf("offsets of a %d-byte name: %v", c.l, err)
		}
	}
}
