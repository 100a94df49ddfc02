package pgstore_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
)

const secretKey = "customer-4711@example.com"

func claimReq() dedup.ClaimRequest {
	now := time.Now()
	return dedup.ClaimRequest{Key: secretKey, Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)}
}

// wantClass checks err's class, that it names the table and not the key,
// and that no segment of its text is empty.
func wantClass(t *testing.T, what string, err error, class retry.Class, table string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	if got := retry.Classify(err); got != class {
		t.Fatalf("%s: class %v, want %v (%v)", what, got, class, err)
	}
	if !strings.Contains(err.Error(), table) || strings.Contains(err.Error(), secretKey) {
		t.Fatalf("%s: %q should name table %s and not the key", what, err, table)
	}
	if at := testenv.EmptySegment(err.Error()); at != "" {
		t.Fatalf("%s: %q has an empty segment at %s", what, err, at)
	}
}

func TestMissingTableMisconfigured(t *testing.T) {
	s := newStore(t, pool(t), "no_such_table")
	wantClass(t, "Check", s.Check(testCtx(t)), retry.Misconfigured, "no_such_table")
	_, err := s.Claim(testCtx(t), claimReq())
	wantClass(t, "Claim", err, retry.Misconfigured, "no_such_table")
}

func TestPermissionDeniedMisconfigured(t *testing.T) {
	p := pool(t)
	table := recordsTable(t, p)
	role := uniqueName("onceq_reader")
	ctx := testCtx(t)
	if _, err := p.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role) })
	if _, err := p.Exec(ctx, "GRANT SELECT ON "+table+" TO "+role); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	rp, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rp.Close)
	s := newStore(t, rp, table)
	wantClass(t, "Check", s.Check(ctx), retry.Misconfigured, table)
	_, err = s.Claim(ctx, claimReq())
	wantClass(t, "Claim", err, retry.Misconfigured, table)
}

// A server that does not answer is an outage, not a configuration fault.
func TestServerDownTransient(t *testing.T) {
	testenv.PostgresURL(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := pgxpool.New(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// A quick policy: the retries end before the context does.
	s := newStore(t, p, "records", pgstore.WithRetryPolicy(retry.Policy{Initial: time.Millisecond, MaxAttempts: 2}))
	_, err = s.Claim(ctx, claimReq())
	wantClass(t, "Claim", err, retry.Transient, "records")
	if errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatal("an outage read as a lost lease")
	}
}
