package pgstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
)

// Beyond the suite's live corrupt records: an expired corrupt record is
// not taken over (its counts would carry on into the new claim) but
// refused as well, and so is a row with a NULL or a time Go cannot hold,
// in a table whose columns allow them.
func TestCorruptRowsRefused(t *testing.T) {
	p := pool(t)
	ctx := testCtx(t)
	table := recordsTable(t, p)
	if _, err := p.Exec(ctx, "ALTER TABLE "+table+" ALTER COLUMN owner DROP NOT NULL"); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, p, table)
	now := time.Now()
	for name, set := range map[string]string{
		"expired, negative attempts": "attempts = -3, expires_at = now() - interval '1 hour'",
		"expired, unknown status":    "status = 'DONE', expires_at = now() - interval '1 hour'",
		"a NULL owner":               "owner = NULL",
		"an expiry of infinity":      "expires_at = 'infinity'",
	} {
		key := "k-" + name
		c, err := s.Claim(ctx, dedup.ClaimRequest{Key: key, Owner: "o-" + name, Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil || !c.Acquired {
			t.Fatalf("%s: claim: %+v, %v", name, c, err)
		}
		if _, err := p.Exec(ctx, "UPDATE "+table+" SET "+set+" WHERE owner = $1", "o-"+name); err != nil {
			t.Fatal(err)
		}
		c, err = s.Claim(ctx, dedup.ClaimRequest{Key: key, Owner: "b", Now: now, LeaseUntil: now.Add(time.Minute)})
		var ce *dedup.CorruptRecordError
		if !errors.As(err, &ce) || ce.KeyHash != dedup.KeyHash(key) {
			t.Errorf("%s: claim: %+v, %v; want a *dedup.CorruptRecordError", name, c, err)
		}
		if _, err := s.Get(ctx, key); !errors.As(err, &ce) {
			t.Errorf("%s: get: %v; want a *dedup.CorruptRecordError", name, err)
		}
	}
}
