package readme

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"go/format"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/internal/testsupport/testenv"
)

const idempotentPage = "../../docs/idempotent-http.md"

// TestIdempotentHTTPWalkthrough runs the payment endpoint of
// docs/idempotent-http.md from its text: its program saved as main.go in
// payments/ beside this checkout (../onceq), each of its commands as
// written, in order, in one shell whose exports carry over (the way
// TestKafkaPostgresWalkthrough runs its page), on a database of its own.
// The page's address (127.0.0.1:8080) is replaced by a free port. The
// page's program is gofmt-clean, and the handler records the payment once.
func TestIdempotentHTTPWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module and runs its server")
	}
	dbURL := freshDatabase(t)
	addr := freeAddr(t)
	programs := fencedBlocks(t, idempotentPage, "go")
	if len(programs) == 0 {
		t.Fatalf("%s has no go block", idempotentPage)
	}
	if formatted, err := format.Source([]byte(programs[0])); err != nil || string(formatted) != programs[0] {
		t.Errorf("the page's program is not gofmt-clean (%v)", err)
	}
	base, dir := pageDir(t, "payments", strings.ReplaceAll(programs[0], "127.0.0.1:8080", addr))
	s := &shell{t: t, dir: dir, state: filepath.Join(base, "shell.env"), jobs: map[int]*process{}}
	if err := os.WriteFile(s.state, []byte("export DATABASE_URL='"+dbURL+"'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 8*time.Minute)
	for _, block := range fencedBlocks(t, idempotentPage, "sh") {
		for line := range strings.Lines(block) {
			line = strings.ReplaceAll(strings.TrimSpace(line), "127.0.0.1:8080", addr)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			want := ""
			if m := prints.FindStringSubmatch(line); m != nil {
				want = m[1]
			}
			s.step(ctx, dir, line, want, time.Minute)
		}
	}
	accepted := 0
	for _, p := range s.all {
		accepted += p.logs.count("payment accepted")
	}
	if accepted != 1 {
		t.Errorf("the handler accepted %d payments, want one", accepted)
	}
}

// freshDatabase creates a database of the test's own on the test server,
// dropped after it, and returns its URL.
func freshDatabase(t *testing.T) string {
	t.Helper()
	base := testenv.PostgresURL(t)
	ctx := testenv.Context(t, time.Minute)
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "onceq_walk_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		_ = conn.Close(context.Background())
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// freeAddr is a loopback address no one listens on, for the page's server.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
