package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The SDK's HTTP transport keeps idle keep-alive connections; their loops
// are the transport's, not the CLI's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		// After PoolSize failed dials (the unreachable-server tests),
		// go-redis probes the server from a goroutine of its own that
		// sleeps a second between probes and ends at the first probe
		// after the client is closed: the client's, not the CLI's.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	)
}

func onceq(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCapacity(t *testing.T) {
	code, out, _ := onceq("capacity", "-rps", "2000", "-dup", "0.15")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	// 2,000 unique messages/s with 15% duplicates: 2,300 writes/s at one write per delivery.
	for _, want := range []string{"2300", "4300", "claim + transaction (2 items)", "10300", "9200", "on-demand"} {
		if !strings.Contains(out, want) {
			t.Errorf("capacity output lacks %q:\n%s", want, out)
		}
	}
	p := planCapacity(2000, 0.15, 2)
	if p.OneWritePerDelivery != 2300 || p.ClaimComplete != 4300 || p.Transaction != 10300 || p.OneRoundTrip != 9200 {
		t.Fatalf("plan %+v", p)
	}
}

// Storage holds retention + 48 h of TTL lag, in the table and the archive.
func TestCapacityStorage(t *testing.T) {
	p := planStorage(100, 24*time.Hour, 300, 30*24*time.Hour, 200)
	if p.TableItems != 100*72*3600 || p.TableBytes != p.TableItems*400 {
		t.Errorf("table %v items %v B, want 25,920,000 items of 400 B", p.TableItems, p.TableBytes)
	}
	if p.ArchiveItems != 100*(30*24+48)*3600 || p.ArchiveBytes != p.ArchiveItems*300 || p.ArchiveRCU != 50 || p.ArchiveWCU != 100 {
		t.Errorf("archive %+v", p)
	}
	if p := planStorage(100, time.Hour, 300, 0, 200); p.ArchiveItems != 0 || p.ArchiveRCU != 0 {
		t.Errorf("no archive: %+v", p)
	}
	code, out, _ := onceq("capacity", "-rps", "100", "-archive-retention", "720h")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"25920000 items", "10.37 GB", "archive (720h0m0s + 48h", "0.5 RCU per new key = 50 RCU"} {
		if !strings.Contains(out, want) {
			t.Errorf("capacity output lacks %q:\n%s", want, out)
		}
	}
}

func TestUsageAndExitCodes(t *testing.T) {
	cases := []struct {
		args []string
		code int
		in   string // where the message goes: "out" or "err"
		want string
	}{
		{nil, 2, "err", "usage: onceq"},
		{[]string{"help"}, 0, "out", "capacity"},
		{[]string{"frobnicate"}, 2, "err", `unknown command "frobnicate"`},
		{[]string{"capacity"}, 2, "err", "-rps must be a positive number"},
		{[]string{"capacity", "-rps", "10", "-dup", "-1"}, 2, "err", "-dup"},
		{[]string{"capacity", "-rps", "10", "-txn-items", "101"}, 2, "err", "1 to 100"},
		{[]string{"capacity", "-bogus"}, 2, "err", "flag provided but not defined"},
		{[]string{"capacity", "-h"}, 0, "err", "usage: onceq capacity"},
		{[]string{"help"}, 0, "out", "create-table"},
		{[]string{"help"}, 0, "out", "inspect"},
		{[]string{"create-table", "-h"}, 0, "err", "usage: onceq create-table"},
		{[]string{"create-table"}, 2, "err", "-table is required"},
		{[]string{"create-table", "-table", "t", "extra"}, 2, "err", `unexpected argument "extra"`},
		{[]string{"inspect", "-h"}, 0, "err", "usage: onceq inspect"},
		{[]string{"inspect", "k"}, 2, "err", "-table is required"},
		{[]string{"inspect", "-table", "t"}, 2, "err", "exactly one KEY"},
		{[]string{"inspect", "-table", "t", "a", "b"}, 2, "err", "exactly one KEY"},
		{[]string{"inspect", "-table", "t", ""}, 2, "err", "empty"},
		{[]string{"inspect", "-table", "t", "-stored-key", ""}, 2, "err", "must not be empty"},
		{[]string{"help"}, 0, "out", "check"},
		{[]string{"check", "-h"}, 0, "err", "usage: onceq check"},
		{[]string{"check"}, 2, "err", "nothing to check"},
		{[]string{"check", "-table", "t", "extra"}, 2, "err", `unexpected argument "extra"`},
		{[]string{"check", "-kafka-topic", "orders"}, 2, "err", "needs -kafka-brokers"},
		{[]string{"check", "-sqs-dlq-url", "u"}, 2, "err", "needs -sqs-queue-url"},
		{[]string{"check", "-table", "t", "-max-attempts", "0"}, 2, "err", "-max-attempts 0"},
		{[]string{"check", "-table", "t", "-lease-ttl", "0s"}, 2, "err", "-lease-ttl 0s"},
	}
	for _, c := range cases {
		code, out, errOut := onceq(c.args...)
		text := errOut
		if c.in == "out" {
			text = out
		}
		if code != c.code || !strings.Contains(text, c.want) {
			t.Errorf("onceq %v: exit %d, %s %q; want exit %d containing %q", c.args, code, c.in, text, c.code, c.want)
		}
	}
}
