package main

import (
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/redisstore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// deadLetter claims key and fails it for good, as a worker keeps a dead
// letter no destination took.
func deadLetter(t *testing.T, s dedup.Store, key, reason string) {
	t.Helper()
	now := time.Now()
	c, err := s.Claim(t.Context(), dedup.ClaimRequest{Key: key, PayloadHash: "h", Owner: "worker-1", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !c.Acquired {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	err = s.Fail(t.Context(), dedup.FailRequest{Lease: c.Lease, Reason: reason, Now: now, RetryAt: now.Add(time.Hour), DeadLetter: true, ResetAttempts: true})
	if err != nil {
		t.Fatal(err)
	}
}

// inspect -status lists the records in that status, through the one code
// path every store takes: the dead letter kept, not the completed record.
func TestInspectStatusListing(t *testing.T) {
	type target struct {
		store dedup.Store
		args  []string
		where string
		key   string // how the dead letter's key is printed
	}
	stores := map[string]func(t *testing.T) target{
		"postgres": func(t *testing.T) target {
			url := testenv.PostgresURL(t)
			conn, table := pgTable(t, url)
			return target{mustPostgres(t, conn, table), []string{"-store", "postgres", "-postgres-url", url, "-table", table}, "table " + table, "onceq#order-9"}
		},
		"redis": func(t *testing.T) target {
			addr := testenv.RedisAddr(t)
			prefix := "onceqcli:" + tableName(t) + ":"
			store, err := redisstore.New(redisUnder(t, addr, prefix), redisstore.Prefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			return target{store, []string{"-store", "redis", "-redis-addr", addr, "-redis-prefix", prefix}, `prefix "` + prefix + `"`, "(not stored: the Redis key holds its SHA-256)"}
		},
		"dynamodb": func(t *testing.T) target {
			table, store := newTable(t, false)
			return target{store, []string{"-table", table}, "table " + table, "onceq#order-9"}
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			tg := open(t)
			complete(t, tg.store, mustKey(t, "onceq", "order-8"), "ok")
			deadLetter(t, tg.store, mustKey(t, "onceq", "order-9"), "refused for good")
			base := append([]string{"inspect"}, tg.args...)
			code, out, errOut := onceq(append(base, "-status", "dead_letter")...)
			if code != 0 || !strings.Contains(out, "key:        "+tg.key+"\nstatus:     DEAD_LETTER\n") ||
				!strings.Contains(out, "last error: refused for good") || strings.Contains(out, "COMPLETED") ||
				!strings.Contains(errOut, "status DEAD_LETTER: 1 records created in the last 1h0m0s in "+tg.where) {
				t.Fatalf("-status DEAD_LETTER: exit %d, out %q, err %q", code, out, errOut)
			}
			code, out, errOut = onceq(append(base, "-status", "FAILED")...)
			if code != 1 || out != "" || !strings.Contains(errOut, "status FAILED: 0 records") {
				t.Fatalf("-status FAILED, none: exit %d, out %q, err %q", code, out, errOut)
			}
		})
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-table", "t", "-status", "LOST"}, `-status "LOST": want PENDING, COMPLETED, FAILED or DEAD_LETTER`},
		{[]string{"-table", "t", "-status", "FAILED", "k"}, "-status lists records: give no KEY"},
		{[]string{"-table", "t", "-status", "FAILED", "-response"}, "-response goes with one record, not -status"},
	} {
		if code, _, errOut := onceq(append([]string{"inspect"}, c.args...)...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("inspect %q: exit %d, err %q, want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}
