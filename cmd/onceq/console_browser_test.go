package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/dedup/redisstore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
)

// chromiumPath is the headless browser the console's pages are loaded in:
// $ONCEQ_CHROMIUM (integration/servers.sh installs Debian's chromium and
// writes it), else chromium on the PATH. Without one the test is
// skipped, except under CI=true, where it fails.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ONCEQ_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not found: set ONCEQ_CHROMIUM or install Debian's chromium; integration/servers.sh start installs it")
	}
	t.Skip("chromium not found: set ONCEQ_CHROMIUM or install Debian's chromium (integration/servers.sh start installs it)")
	return ""
}

// browser is a tab of a headless Chromium, closed with the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.WindowSize(1280, 900),
		// Root in a container has no user namespace to sandbox in.
		chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// Start the browser now, so a failure to is the test's first.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[int]("1")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// startConsole runs onceq console with args on a free loopback port and
// returns its address; it stops with the test.
func startConsole(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	errOut := &testenv.LogBuffer{}
	done := make(chan int, 1)
	go func() {
		code := run(ctx, append(append([]string{"console"}, args...), "-addr", "127.0.0.1:0"), w, errOut)
		_ = w.Close()
		done <- code
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("console exit %d: %s", code, errOut.String())
		}
	})
	line, err := bufio.NewReader(r).ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, r) }()
	if err != nil {
		t.Fatalf("console: %v: %s", err, errOut.String())
	}
	_, rest, ok := strings.Cut(line, "http://")
	addr, _, _ := strings.Cut(rest, "/")
	if !ok || addr == "" {
		t.Fatalf("console printed %q, want its address", line)
	}
	return "http://" + addr
}

// The records the console's pages show, with real keys and reasons.
const (
	consoleNS   = "onceq"
	schemaError = "schema: missing field customer_id"
	poisonError = "poison: the body is not JSON"
	retryError  = "payment API: 503 Service Unavailable"
	// hostileKey and hostileReason would run script if a page did not
	// escape them: each sets window.pwned.
	hostileKey    = `<img src=x onerror="window.pwned=1">`
	hostileReason = `<script>window.pwned=2</script><img src=y onerror="window.pwned=3">`
	refusedReason = "outbox: the destination refused the message: too large"
	batchGroup    = "billing"
	batchTopic    = "invoices"
)

// fillConsole writes the records a console test reads: a completed
// message with a response and outgoing entries (one refused for good: a
// DEAD entry), a lease held after a takeover and one abandoned, a failed
// run, dead letters under two reasons, one with a hostile key and
// reason, and, where the store keeps them, batch mode's offsets.
func fillConsole(t *testing.T, st dedup.Store) {
	t.Helper()
	ctx := t.Context()
	now := time.Now()
	k := func(id string) string { return mustKey(t, consoleNS, id) }
	claim := func(key string, at, until time.Time) dedup.Lease {
		t.Helper()
		c, err := st.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadHash: "h", Owner: "worker-" + id(key), Now: at, LeaseUntil: until})
		if err != nil || !c.Acquired {
			t.Fatalf("claim: %+v, %v", c, err)
		}
		return c.Lease
	}
	fail := func(l dedup.Lease, reason string, at, retry time.Time, dead bool) {
		t.Helper()
		if err := st.Fail(ctx, dedup.FailRequest{Lease: l, Reason: reason, Now: at, RetryAt: retry, DeadLetter: dead}); err != nil {
			t.Fatal(err)
		}
	}
	caps := st.Capabilities()
	var msgs []outbox.Message
	if caps.Outbox != nil {
		msgs = []outbox.Message{
			{Destination: "orders-shipped", OrderingKey: "customer-7", Body: []byte(`{"order":1001}`)},
			{Destination: "orders-shipped", OrderingKey: "customer-7", Body: []byte(`{"order":1001,"part":2}`)},
			{Destination: "audit-log", Body: []byte(strings.Repeat("x", 64))},
		}
	}
	l := claim(k("order-1001"), now.Add(-time.Minute), now.Add(time.Minute))
	if err := st.Complete(ctx, dedup.CompleteRequest{Lease: l, Response: []byte(`{"status":"shipped","tracking":"1Z999"}`), Now: now, ExpiresAt: now.Add(24 * time.Hour), Outbox: msgs}); err != nil {
		t.Fatal(err)
	}
	// A lease taken over from a worker that died, held now.
	claim(k("order-1002"), now.Add(-10*time.Minute), now.Add(-9*time.Minute))
	claim(k("order-1002"), now.Add(-2*time.Minute), now.Add(5*time.Minute))
	// A lease abandoned: its worker died a minute ago.
	claim(k("order-1003"), now.Add(-3*time.Minute), now.Add(-time.Minute))
	// Two failed runs, retried in an hour.
	l = claim(k("order-1004"), now.Add(-5*time.Minute), now.Add(-4*time.Minute))
	fail(l, retryError, now.Add(-5*time.Minute), now.Add(-4*time.Minute), false)
	l = claim(k("order-1004"), now.Add(-3*time.Minute), now.Add(time.Minute))
	fail(l, retryError, now.Add(-3*time.Minute), now.Add(time.Hour), false)
	for _, d := range []struct{ id, reason string }{
		{"order-2001", schemaError}, {"order-2002", schemaError}, {"order-2003", poisonError}, {hostileKey, hostileReason},
	} {
		fail(claim(k(d.id), now, now.Add(time.Minute)), d.reason, now, now.Add(24*time.Hour), true)
	}
	if caps.Outbox != nil {
		ob := st.(interface{ Outbox() outbox.Store }).Outbox()
		es, err := ob.Lease(ctx, outbox.LeaseRequest{Owner: "relay-1", Now: now, LeaseUntil: now.Add(time.Minute), Max: 10})
		if err != nil || len(es) != len(msgs) {
			t.Fatalf("lease the outbox: %d entries, %v", len(es), err)
		}
		for _, e := range es {
			if e.Destination == "audit-log" {
				err = ob.Dead(ctx, e.Lease, refusedReason, now, now.Add(24*time.Hour))
			} else {
				err = ob.Retry(ctx, e.Lease, "kafka: leader not available", now, now)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if offsets := caps.Offsets; offsets != nil {
		part := func(n int32) batch.Partition {
			return batch.Partition{Group: batchGroup, Topic: batchTopic, Partition: n}
		}
		l0, err := offsets.Acquire(ctx, part(0), "member-a")
		if err != nil {
			t.Fatal(err)
		}
		if err := offsets.Commit(ctx, batch.Commit{Lease: l0, From: 0, Next: 42, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if _, err := offsets.Acquire(ctx, part(1), "member-b"); err != nil {
			t.Fatal(err)
		}
	}
}

// id is a stored key's message key, for its worker's name.
func id(key string) string {
	_, k, _ := strings.Cut(key, "#")
	if len(k) > 12 {
		return "x"
	}
	return k
}

// consoleStore is a store with the console's records, and the flags
// that open it.
type consoleStore struct {
	name string
	args []string
	st   dedup.Store
}

func consoleStores(t *testing.T) []func(t *testing.T) consoleStore {
	return []func(t *testing.T) consoleStore{
		func(t *testing.T) consoleStore {
			url := testenv.PostgresURL(t)
			conn, table := pgTable(t, url)
			t.Cleanup(func() {
				_, _ = conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgstore.OutboxTable(table)+", "+pgstore.OffsetsTable(table)+"; DROP SEQUENCE IF EXISTS "+pgstore.OutboxSequence(table))
			})
			return consoleStore{"postgres", []string{"-store", "postgres", "-postgres-url", url, "-table", table}, mustPostgres(t, conn, table)}
		},
		func(t *testing.T) consoleStore {
			db := localAWS(t)
			table := tableName(t)
			if code, _, errOut := onceq("create-table", "-table", table, "-outbox"); code != 0 {
				t.Fatalf("create-table: %s", errOut)
			}
			st, err := dynamostore.New(db, dynamostore.WithTable(table), dynamostore.WithoutClockCheck())
			if err != nil {
				t.Fatal(err)
			}
			return consoleStore{"dynamodb", []string{"-table", table}, st}
		},
		func(t *testing.T) consoleStore {
			addr := testenv.RedisAddr(t)
			prefix := "onceqcli:" + tableName(t) + ":"
			st, err := redisstore.New(redisUnder(t, addr, prefix), redisstore.Prefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			return consoleStore{"redis", []string{"-store", "redis", "-redis-addr", addr, "-redis-prefix", prefix}, st}
		},
	}
}

// pageCheck loads a page and returns the text of sel.
type pageCheck struct {
	t    *testing.T
	ctx  context.Context
	base string
	dir  string
}

// load navigates to path, saves a screenshot as name.png, and returns
// the text of main.
func (p pageCheck) load(path, name string) string {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, chromedp.Navigate(p.base+path), chromedp.WaitVisible(chromedp.CSS("main"))); err != nil {
		p.t.Fatalf("load %s: %v", path, err)
	}
	p.shoot(name)
	p.noScriptRan(path)
	return p.text("main")
}

// text is the text of the first element sel selects, as shown.
func (p pageCheck) text(sel string) string {
	p.t.Helper()
	text, err := chromedp.Run(p.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		p.t.Fatalf("text of %s: %v", sel, err)
	}
	return text
}

// do runs steps, then waits for sel to show.
func (p pageCheck) do(what, sel string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, append(steps, chromedp.WaitVisible(chromedp.CSS(sel)))...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// shoot saves a screenshot of the whole page as name.png.
func (p pageCheck) shoot(name string) {
	p.t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	p.save(name, png)
}

func (p pageCheck) save(name string, png []byte) {
	p.t.Helper()
	if err := os.WriteFile(filepath.Join(p.dir, name+".png"), png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// noScriptRan fails the test if a key or reason ran as script (set
// window.pwned) or became an element (an img of the page's own: it has
// none).
func (p pageCheck) noScriptRan(path string) {
	p.t.Helper()
	pwned, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`typeof window.pwned`))
	if err != nil {
		p.t.Fatalf("%s: %v", path, err)
	}
	imgs := p.count("img")
	scripts := p.count("script")
	if pwned != "undefined" || imgs != 0 || scripts != 0 {
		p.t.Fatalf("%s: a stored string ran or became markup: window.pwned is %s, %d img and %d script elements", path, pwned, imgs, scripts)
	}
}

func urlQuery(s string) string { return url.QueryEscape(s) }

// count is how many elements sel selects.
func (p pageCheck) count(sel string) int {
	p.t.Helper()
	n, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(sel)+`).length`))
	if err != nil {
		p.t.Fatalf("count %s: %v", sel, err)
	}
	return n
}

func wantIn(t *testing.T, page, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%s: %q not shown in:\n%s", page, w, text)
		}
	}
}

// Every view of onceq console, loaded in headless Chromium over each
// store with real records: what each page shows, a message found by key
// and by key_hash, a record forgotten through the confirmation, and no
// hostile key or reason running as script. A screenshot of each view is
// saved in the test's artifact directory (go test -artifacts keeps them
// under -outputdir).
func TestConsoleInBrowser(t *testing.T) {
	chromiumPath(t)
	for _, open := range consoleStores(t) {
		cs := open(t)
		t.Run(cs.name, func(t *testing.T) {
			fillConsole(t, cs.st)
			base := startConsole(t, append(cs.args, "-actions", "-page-size", "3")...)
			p := pageCheck{t: t, ctx: browser(t), base: base, dir: t.ArtifactDir()}
			outboxes := cs.name != "redis"
			// A listing names a record by its key, or by its key_hash
			// where the store keeps none (Redis).
			listed := func(id string) string {
				if outboxes {
					return mustKey(t, consoleNS, id)
				}
				return dedup.KeyHash(mustKey(t, consoleNS, id))
			}

			wantIn(t, "home", p.load("/", "home"), "By key", "By key_hash")

			text := p.load("/records?status=PENDING", "in-flight")
			inFlight := []string{listed("order-1002"), "worker-order-1002"}
			// The abandoned lease has expired: a store with a TTL (DynamoDB)
			// may have removed it already, which the page must then not show.
			if _, err := cs.st.Get(t.Context(), mustKey(t, consoleNS, "order-1003")); errors.Is(err, dedup.ErrNotFound) {
				if strings.Contains(text, listed("order-1003")) {
					t.Errorf("in flight: order-1003, removed by the store's TTL, still shown")
				}
			} else {
				inFlight = append(inFlight, listed("order-1003"), "abandoned")
			}
			wantIn(t, "in flight", text, inFlight...)

			text = p.load("/records?status=DEAD_LETTER", "dead-letters")
			wantIn(t, "dead letters", text, schemaError+"\t2", poisonError+"\t1", hostileReason+"\t1", "4 record(s) read", "next →")
			if rows := p.count("#records tr"); rows != 4 {
				t.Errorf("dead letters, page 0: %d rows (header included), want 1+3 (-page-size 3)", rows)
			}
			p.do("next page", "#prev", chromedp.Click(chromedp.CSS("#next")))
			if page2 := p.text("#records"); strings.Count(page2, "\n") != 1 {
				t.Errorf("dead letters, page 1: %q, want the fourth record alone", page2)
			}
			p.noScriptRan("dead letters, page 1")

			text = p.load("/records?status=DEAD_LETTER&reason="+urlQuery(schemaError), "dead-letters-by-reason")
			wantIn(t, "dead letters of a reason", text, listed("order-2001"), listed("order-2002"))
			if strings.Contains(text, listed("order-2003")) {
				t.Errorf("dead letters of reason %q show order-2003 (%s)", schemaError, poisonError)
			}

			wantIn(t, "failed", p.load("/records?status=FAILED", "failed"), listed("order-1004"), retryError+"\t1")

			text = p.load("/outbox", "outbox-backlog")
			if outboxes {
				wantIn(t, "outbox", text, "orders-shipped\tcustomer-7\t2", "kafka: leader not available", "2 PENDING entries read")
				wantIn(t, "outbox DEAD", p.load("/outbox?state=DEAD", "outbox-dead"), "onceq#order-1001#out2", "audit-log", refusedReason)
			} else {
				wantIn(t, "outbox", text, "This store keeps no outbox.")
			}

			text = p.load("/batch?group="+batchGroup+"&topic="+batchTopic+"&partitions=3", "batch-offsets")
			if outboxes {
				wantIn(t, "batch", text, "0\t42\tmember-a", "1\tnone yet (taken, nothing committed)\tmember-b", "2\tno row: no member took this partition")
			} else {
				wantIn(t, "batch", text, "This store keeps no offsets of batch mode.")
			}

			// A message's story, found through the form as an operator types it.
			p.do("look up a key", "section.story",
				chromedp.Navigate(base+"/message"),
				chromedp.SendKeys(chromedp.CSS(`input[name="key"]`), "order-1001"),
				chromedp.Submit(chromedp.CSS(`input[name="key"]`)))
			p.shoot("message")
			story := p.text("main")
			wantIn(t, "story", story, "onceq#order-1001", "COMPLETED", `{"status":"shipped","tracking":"1Z999"}`, "39 bytes")
			if outboxes {
				wantIn(t, "story", story, "onceq#order-1001#out0\tPENDING\torders-shipped\tcustomer-7\t1\tkafka: leader not available",
					"onceq#order-1001#out2\tDEAD\taudit-log", refusedReason)
			} else {
				wantIn(t, "story", story, "This store keeps no outbox.")
			}

			if outboxes {
				// Redrive the message's DEAD entry: its confirmation, then
				// onceq redrive's run puts it back to PENDING.
				p.do("redrive", "#confirm", chromedp.Click(chromedp.CSS("#redrive")))
				p.shoot("redrive-confirm")
				wantIn(t, "redrive confirmation", p.text("main"), "onceq#order-1001#out2\tDEAD\taudit-log", "Redrive 1 DEAD entry")
				p.do("confirm the redrive", "#done", chromedp.Click(chromedp.CSS("#confirm")))
				p.shoot("redrive-done")
				wantIn(t, "redriven", p.text("#done"), "1 looked at: moved 1")
				es, err := cs.st.(interface{ Outbox() outbox.Store }).Outbox().Entries(t.Context(), outbox.Dead, 10)
				if err != nil || len(es) != 0 {
					t.Errorf("after the redrive, DEAD entries: %v, %v; want none", es, err)
				}
				wantIn(t, "story after the redrive", p.load("/message?key=order-1001", "message-redriven"),
					"onceq#order-1001#out2\tPENDING\taudit-log")
			}

			// By key_hash, as a log line carries it: Redis keeps no key.
			hash := dedup.KeyHash(mustKey(t, consoleNS, "order-1004"))
			text = p.load("/message?key_hash="+hash, "message-by-key-hash")
			wantIn(t, "by key_hash", text, "key_hash "+hash, "FAILED", retryError, "2 failed run(s)")

			text = p.load("/message?key=order-1002", "message-in-flight")
			wantIn(t, "in-flight story", text, "PENDING", "1 of an abandoned lease", "held, ends in ")

			// The hostile dead letter's own page: shown as text, run as nothing.
			text = p.load("/message?key="+urlQuery(hostileKey), "message-hostile")
			wantIn(t, "hostile", text, "onceq#"+hostileKey, hostileReason)

			// Forget a dead letter: its page, the confirmation, the result.
			doomed := mustKey(t, consoleNS, "order-2001")
			p.load("/message?stored_key="+urlQuery(doomed), "forget-before")
			p.do("forget", "#confirm", chromedp.Click(chromedp.CSS("#forget")))
			p.shoot("forget-confirm")
			confirm := p.text("main")
			wantIn(t, "confirmation", confirm, doomed, schemaError, "Forget this record")
			if _, err := cs.st.Get(t.Context(), doomed); err != nil {
				t.Fatalf("the record is gone before the confirmation: %v", err)
			}
			p.do("confirm", "#done", chromedp.Click(chromedp.CSS("#confirm")))
			p.shoot("forget-done")
			done := p.text("#done")
			wantIn(t, "forgotten", done, "was forgotten", dedup.KeyHash(doomed))
			if _, err := cs.st.Get(t.Context(), doomed); !errors.Is(err, dedup.ErrNotFound) {
				t.Errorf("after the confirmation, Get: %v, want ErrNotFound", err)
			}
			wantIn(t, "forgotten story", p.load("/message?stored_key="+urlQuery(doomed), "forget-after"), "no record of key_hash "+dedup.KeyHash(doomed))
			t.Logf("screenshots in %s", p.dir)
		})
	}
}
