// Package servers tests integration/servers.sh itself: what it starts, from
// where, and what it leaves behind.
package servers

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A checkout under a private directory (mode 0700, as a home directory
// often is) starts PostgreSQL: run by root, servers.sh runs it as the
// postgres user, which cannot enter the checkout, so its data must live
// where that user can reach it. Starting PostgreSQL alone needs neither npm
// nor the Lambda emulator, and stop removes the data it made.
func TestPostgresFromPrivateDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	if os.Getuid() != 0 {
		t.Skip("servers.sh runs PostgreSQL as another user only when run by root")
	}
	if _, err := os.Stat("/usr/lib/postgresql/15/bin/initdb"); err != nil {
		t.Skip("PostgreSQL 15 is not installed")
	}
	priv := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(priv, 0o700); err != nil {
		t.Fatal(err)
	}
	// The files servers.sh needs beside it, in a checkout of the same shape.
	dir := filepath.Join(priv, "onceq", "integration")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"servers.sh", "package.json", "package-lock.json", "loopback-preload.mjs"} {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := filepath.Join(priv, "run")
	servers := func(args ...string) (string, error) {
		cmd := exec.Command("bash", append([]string{filepath.Join(dir, "servers.sh")}, args...)...)
		cmd.Env = append(os.Environ(), "ONCEQ_RUN_DIR="+run, "ONCEQ_SERVERS_TIMEOUT=60")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	t.Cleanup(func() { _, _ = servers("stop", "postgres") })
	out, err := servers("start", "postgres")
	if err != nil {
		t.Fatalf("start postgres from under a 0700 directory: %v\n%s", err, out)
	}
	if strings.Contains(out, "npm") || strings.Contains(out, "aws-lambda-rie") {
		t.Errorf("start postgres installed what only other servers need:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err == nil {
		t.Error("start postgres made node_modules")
	}
	env, err := os.ReadFile(filepath.Join(run, "env"))
	if err != nil || !bytes.Contains(env, []byte("ONCEQ_POSTGRES_URL=postgres://")) {
		t.Fatalf("env after start: %q, %v", env, err)
	}
	status, err := servers("status")
	if err != nil || !strings.Contains(status, "postgres: running, pid") {
		t.Fatalf("status: %v\n%s", err, status)
	}
	data, err := os.ReadFile(filepath.Join(run, "postgres.data"))
	if err != nil {
		t.Fatalf("where the data lives: %v", err)
	}
	datadir := strings.TrimSpace(string(data))
	if st, err := os.Stat(filepath.Join(datadir, "PG_VERSION")); err != nil || st.IsDir() {
		t.Fatalf("no cluster in %s: %v", datadir, err)
	}
	if out, err := servers("stop", "postgres"); err != nil {
		t.Fatalf("stop: %v\n%s", err, out)
	}
	if status, _ := servers("status"); !strings.Contains(status, "postgres: stopped") {
		t.Fatalf("status after stop:\n%s", status)
	}
	if _, err := os.Stat(datadir); !os.IsNotExist(err) {
		t.Fatalf("stop left the data in %s (%v)", datadir, err)
	}
}
