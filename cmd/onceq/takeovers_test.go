package main

import (
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
)

// inspect shows a record's takeovers of an abandoned lease once there is
// one, and no such line before.
func TestInspectTakeovers(t *testing.T) {
	c := localAWS(t)
	table := tableName(t)
	if code, _, errOut := onceq("create-table", "-table", table); code != 0 {
		t.Fatalf("create-table: exit %d: %s", code, errOut)
	}
	store, err := openStore(c, table, false)
	if err != nil {
		t.Fatal(err)
	}
	key, err := dedup.Key("orders", "order-7")
	if err != nil {
		t.Fatal(err)
	}
	// A lease that ended 19s ago (the claim's margin lets its Now lag).
	then := time.Now().Add(-20 * time.Second)
	req := dedup.ClaimRequest{Key: key, PayloadHash: "h", Owner: "worker-a", Now: then, LeaseUntil: then.Add(time.Second), SkewMargin: 30 * time.Second}
	if cl, err := store.Claim(t.Context(), req); err != nil || !cl.Acquired {
		t.Fatalf("claim: %+v, %v", cl, err)
	}
	if _, out, _ := onceq("inspect", "-table", table, "-stored-key", key); strings.Contains(out, "takeovers") {
		t.Fatalf("inspect of a record never taken over shows takeovers:\n%s", out)
	}
	now := time.Now()
	req = dedup.ClaimRequest{Key: key, PayloadHash: "h", Owner: "worker-b", Now: now, LeaseUntil: now.Add(time.Minute), SkewMargin: 5 * time.Second}
	if cl, err := store.Claim(t.Context(), req); err != nil || !cl.Acquired || cl.Takeovers != 1 {
		t.Fatalf("takeover: %+v, %v", cl, err)
	}
	code, out, errOut := onceq("inspect", "-table", table, "-stored-key", key)
	if code != 0 || !strings.Contains(out, "takeovers:  1 (of an abandoned lease)") {
		t.Fatalf("inspect after a takeover: exit %d, %s\n%s", code, errOut, out)
	}
}
