package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/dedup/redisstore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
)

// hostile holds what could forge a line or drive a terminal: line
// breaks, a carriage return, escape sequences, a C1 control, a line
// separator, a bidirectional control, an invalid byte.
const hostile = "k\nFORGED  destination=x\r\x1b[2J\x1b]0;t\x07\u0085\u2028\u202e\xff"

// controlFree: no character of s but the line ends could move the
// cursor, reorder text or break a line.
func controlFree(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(strings.ReplaceAll(s, "\n", ""), func(r rune) bool {
		return !unicode.IsPrint(r) && r != '\t'
	})
}

// One record or entry always prints as exactly its lines, whatever its
// strings hold, and each quoted field reads back as the string stored.
func FuzzPrintedLines(f *testing.F) {
	f.Add("onceq#k", "queue", "", "", "w-1")
	f.Add(hostile, hostile, hostile, hostile, hostile)
	f.Add(`"quoted"`, "\t", "\xc3", "\r", "")
	f.Add("\uFFFD", "a\\nb", "\u00a0", "\u200b", "é")
	f.Fuzz(func(t *testing.T, key, dest, okey, reason, owner string) {
		for _, s := range []string{key, dest, okey, reason, owner} {
			got := field(s)
			if !controlFree(got) || strings.Contains(got, "\n") {
				t.Fatalf("field(%q) = %q: a control character printed", s, got)
			}
			if got != s {
				if u, err := strconv.Unquote(got); err != nil || u != s {
					t.Fatalf("field(%q) = %q, which reads back as %q, %v", s, got, u, err)
				}
			}
		}
		var b bytes.Buffer
		printEntry(&b, outbox.Entry{ID: key, Message: outbox.Message{Destination: dest, OrderingKey: okey}, LastError: reason, CreatedAt: time.Unix(0, 0), ExpiresAt: time.Unix(0, 0)})
		want := 1
		if reason != "" {
			want = 2
		}
		if n := strings.Count(b.String(), "\n"); n != want || !controlFree(b.String()) || (want == 2 && !strings.Contains(b.String(), "\n    reason: ")) {
			t.Fatalf("entry printed as %d lines, want %d: %q", n, want, b.String())
		}
		b.Reset()
		printRecord(&b, dedup.Record{Key: key, Status: dedup.Status(dest), Owner: owner, LastError: reason, ExpiresAt: time.Unix(0, 0)}, time.Unix(0, 0))
		want = 7 // key, status, version, expires, attempts, response, owner
		if reason != "" {
			want++
		}
		if n := strings.Count(b.String(), "\n"); n != want || !controlFree(b.String()) {
			t.Fatalf("record printed as %d lines, want %d: %q", n, want, b.String())
		}
	})
}

// Labels begin each line inspect prints of a record.
var recordLabels = []string{"key:", "status:", "version:", "expires:", "attempts:", "takeovers:", "response:", "owner:", "created:", "last error:"}

// wantRecordLines fails unless out is one record's lines, each beginning
// with its label, and nothing in it drives the terminal.
func wantRecordLines(t *testing.T, store, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	for _, l := range lines {
		if !hasLabel(l) {
			t.Errorf("%s: inspect printed a line of no field: %q in %q", store, l, out)
		}
	}
	if !controlFree(out) || strings.Count(out, "\nstatus:") != 1 || !strings.HasPrefix(out, "key:") {
		t.Errorf("%s: inspect printed %q; want one record, controls escaped", store, out)
	}
}

func hasLabel(l string) bool {
	for _, p := range recordLabels {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// wantEntryLines fails unless out is n outbox entries (no reason) and
// the count line.
func wantEntryLines(t *testing.T, store, out string, n int) {
	t.Helper()
	if strings.Count(out, "\n") != n+1 || !controlFree(out) || !strings.Contains(out, "\n"+strconv.Itoa(n)+" entries in state PENDING") {
		t.Errorf("%s: inspect -outbox printed %q; want %d entry lines and the count, controls escaped", store, out, n)
	}
}

// A key, an entry ID, a destination and an ordering key holding line
// breaks and escape sequences print escaped, as exactly the lines of
// their record or entry, on every store inspect reads.
func TestInspectCannotBeForged(t *testing.T) {
	msgs := []outbox.Message{{Destination: hostile, OrderingKey: hostile, Body: []byte("b")}}
	key := "onceq#" + hostile
	t.Run("postgres", func(t *testing.T) {
		url := testenv.PostgresURL(t)
		conn, table := pgTable(t, url)
		t.Cleanup(func() {
			_, _ = conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgstore.OutboxTable(table)+", "+pgstore.OffsetsTable(table)+"; DROP SEQUENCE IF EXISTS "+pgstore.OutboxSequence(table))
		})
		st := mustPostgres(t, conn, table)
		claimComplete(st)(t, key, msgs)
		base := []string{"inspect", "-store", "postgres", "-postgres-url", url, "-table", table}
		code, out, errOut := onceq(append(base, "-stored-key", key)...)
		if code != 0 {
			t.Fatalf("inspect: exit %d, %q", code, errOut)
		}
		wantRecordLines(t, "postgres", out)
		_, out, _ = onceq(append(base, "-outbox", "PENDING")...)
		wantEntryLines(t, "postgres", out, 1)
	})
	t.Run("dynamodb", func(t *testing.T) {
		table, st := dynamoWithOutbox(t)
		claimComplete(st)(t, key, msgs)
		code, out, errOut := onceq("inspect", "-table", table, "-stored-key", key)
		if code != 0 {
			t.Fatalf("inspect: exit %d, %q", code, errOut)
		}
		wantRecordLines(t, "dynamodb", out)
		_, out, _ = onceq("inspect", "-table", table, "-outbox", "PENDING")
		wantEntryLines(t, "dynamodb", out, 1)
	})
	t.Run("redis", func(t *testing.T) {
		addr := testenv.RedisAddr(t)
		prefix := "onceqcli:" + tableName(t) + ":"
		st, err := redisstore.New(redisUnder(t, addr, prefix), redisstore.Prefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		complete(t, st, key, "ok")
		code, out, errOut := onceq("inspect", "-store", "redis", "-redis-addr", addr, "-redis-prefix", prefix, "-stored-key", key)
		if code != 0 {
			t.Fatalf("inspect: exit %d, %q", code, errOut)
		}
		wantRecordLines(t, "redis", out)
	})
}

// An entry's line counts its failed sends and its releases apart: an
// entry held back behind its lane's failures shows releases, not attempts.
func TestPrintEntryCountsReleases(t *testing.T) {
	var b bytes.Buffer
	printEntry(&b, outbox.Entry{ID: "e-1", Message: outbox.Message{Destination: "orders"}, Attempts: 2, Releases: 3,
		CreatedAt: time.Unix(0, 0), ExpiresAt: time.Unix(0, 0)})
	if got := b.String(); !strings.Contains(got, " attempts=2 releases=3 ") {
		t.Fatalf("entry printed as %q, want attempts=2 releases=3", got)
	}
}
