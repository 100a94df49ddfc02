package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/examples/storehistory"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// -pipeline's flags: refused with batch mode or without a relay or a
// shipping worker; the pool's processes are the order workers, then the
// relays, then the shipping workers.
func TestPipelineFlags(t *testing.T) {
	t.Setenv("ONCEQ_DYNAMODB_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("ONCEQ_SQS_ENDPOINT", "http://127.0.0.1:1")
	for _, args := range [][]string{
		{"-pipeline", "-source", "kafka", "-batch"},
		{"-pipeline", "-relays", "0"},
		{"-pipeline", "-ship-workers", "0"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q: accepted", strings.Join(args, " "))
		}
	}
	cfg, err := parseFlags([]string{"-pipeline", "-workers", "2", "-relays", "1", "-ship-workers", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for i := range processes(cfg) {
		roles = append(roles, roleOf(cfg, i).String())
	}
	if got := strings.Join(roles, " "); got != "worker worker relay ship ship ship" {
		t.Fatalf("roles %q", got)
	}
	if cfg, _ = parseFlags(nil, io.Discard); processes(cfg) != cfg.workers {
		t.Fatalf("without -pipeline: %d processes, want %d", processes(cfg), cfg.workers)
	}
}

// The relays run onceq relay's own lease and pass size, unless
// -relay-lease-ttl or -relay-batch set them.
func TestRelayArgsKeepTheDefaults(t *testing.T) {
	t.Setenv("ONCEQ_DYNAMODB_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("ONCEQ_SQS_ENDPOINT", "http://127.0.0.1:1")
	for _, c := range []struct {
		flags      []string
		has, hasnt string
	}{
		{[]string{"-pipeline"}, "", "-lease-ttl -batch"},
		{[]string{"-pipeline", "-relay-lease-ttl", "10s", "-relay-batch", "10"}, "-lease-ttl 10s -batch 10", ""},
	} {
		cfg, err := parseFlags(c.flags, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		args := " " + strings.Join((&pool{cfg: cfg, ship: &sqsBroker{}}).relayArgs(), " ") + " "
		if c.has != "" && !strings.Contains(args, " "+c.has+" ") {
			t.Errorf("%q: relay args %q; want %q", c.flags, args, c.has)
		}
		for _, f := range strings.Fields(c.hasnt) {
			if strings.Contains(args, " "+f+" ") {
				t.Errorf("%q: relay args %q; want no %s", c.flags, args, f)
			}
		}
	}
}

// absorbed counts the shipping workers' claims that found the record
// COMPLETED, and nothing else: not an acquired claim, a claim that found
// a lease held, a call's start or a cut last line.
func TestAbsorbedCountsCompletedClaims(t *testing.T) {
	dir := t.TempDir()
	done := &storehistory.Record{Status: dedup.StatusCompleted, Version: 2}
	held := &storehistory.Record{Status: dedup.StatusPending, Version: 1}
	events := []storehistory.Event{
		{Kind: storehistory.KindCall, Op: storehistory.OpClaim, Key: "o-1#out0"},
		{Kind: storehistory.KindReturn, Op: storehistory.OpClaim, Key: "o-1#out0", Outcome: storehistory.OutcomeOK, Acquired: true},
		{Kind: storehistory.KindReturn, Op: storehistory.OpClaim, Key: "o-1#out0", Outcome: storehistory.OutcomeOK, Record: held},
		{Kind: storehistory.KindReturn, Op: storehistory.OpClaim, Key: "o-1#out0", Outcome: storehistory.OutcomeOK, Record: done},
		{Kind: storehistory.KindReturn, Op: storehistory.OpClaimComplete, Key: "o-2#out0", Outcome: storehistory.OutcomeOK, Record: done},
		{Kind: storehistory.KindReturn, Op: storehistory.OpClaim, Key: "o-3#out0", Outcome: storehistory.OutcomeUnknown, Record: done},
	}
	var b strings.Builder
	for _, e := range events {
		line, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	b.WriteString(`{"ev":"return","op":"cl`) // a killed process's cut line
	if err := os.WriteFile(filepath.Join(dir, "ship-5-1.history"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := absorbed(filepath.Join(dir, "ship-*.history"))
	if err != nil || n != 2 {
		t.Fatalf("absorbed %d, %v; want 2", n, err)
	}
}

// The short pipeline run: order workers, relays and shipping workers on
// SQS and DynamoDB (behind the fault proxy), all killed; every order must
// ship exactly once and the outbox end empty.
func TestChaosShortPipeline(t *testing.T) {
	besideOthers(t, testenv.DynamoDBEndpoint, testenv.SQSEndpoint)
	res := shortRun(t, "-pipeline", "-orders", "500", "-timeout", "6m")
	p := res.pipeline
	if p == nil || p.lost != 0 || p.doubled != 0 || p.outboxPending != 0 || p.shipped != res.unique {
		t.Fatalf("shipping: %+v: %s", p, res.line())
	}
	// Every order's shipments were joined to its event's record calls.
	if res.history.Effects != res.unique {
		t.Fatalf("effects counted for %d keys, want %d: %s", res.history.Effects, res.unique, res.history.Line())
	}
	t.Log(p.line())
}

// fakeShipments is a run's tables with only its shipments read.
type fakeShipments struct {
	tables
	rows map[string]int64
}

func (f fakeShipments) shipments(context.Context) (map[string]int64, error) { return f.rows, nil }

// verifyPipeline counts an order with no shipment as lost, and every
// shipment past an order's first, or of no order, as doubled.
func TestVerifyPipelineCounts(t *testing.T) {
	want := expected{orders: map[string]int64{"o-1": 1, "o-2": 1, "o-3": 2}}
	tb := fakeShipments{rows: map[string]int64{"o-1": 1, "o-2": 2, "o-9": 1}}
	var p pipelineResult
	if err := verifyPipeline(context.Background(), tb, memstoretest.New(t).Outbox(), t.TempDir(), want, &p); err != nil {
		t.Fatal(err)
	}
	if p.shipped != 3 || p.lost != 1 || p.doubled != 2 || p.outboxPending != 0 || p.absorbed != 0 {
		t.Fatalf("%s", p.line())
	}
}

// The shipments counted reach the history's verdict under their events'
// record keys: an order shipped twice is a duplicated key even when its
// calls show one commit, one never shipped but acked is lost, and a
// shipment under no key the histories hold is refused.
func TestShipmentsAreEffects(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i, id := range []string{"o-1", "o-2"} {
		k, err := shipKey(id)
		if err != nil {
			t.Fatal(err)
		}
		owner := "w" + id
		b.WriteString(fmt.Sprintf(`{"id":%[1]d,"ev":"call","op":"claim","key":%[2]q,"t":1,"owner":%[3]q,"now":1,"until":100}
{"id":%[1]d,"ev":"return","op":"claim","key":%[2]q,"t":2,"out":"ok","acquired":true,"record":{"status":"PENDING","version":1,"owner":%[3]q}}
{"id":%[4]d,"ev":"call","op":"complete","key":%[2]q,"t":3,"owner":%[3]q,"version":1,"now":3,"until":1000}
{"id":%[4]d,"ev":"return","op":"complete","key":%[2]q,"t":4,"out":"ok"}
{"ev":"settle","key":%[2]q,"t":5,"action":"ack","out":"ok"}
`, 2*i+1, k, owner, 2*i+2))
	}
	if err := os.WriteFile(filepath.Join(dir, "ship-5-1.history"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	want := expected{orders: map[string]int64{"o-1": 1, "o-2": 1}}
	p := pipelineResult{shipments: map[string]int64{"o-1": 2}}
	fx, err := p.effects(want)
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := checkHistory(context.Background(), dir, memstoretest.New(t), fx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Effects != 2 || r.Duplicated != 1 || r.Lost != 1 {
		t.Fatalf("effects=%d duplicated=%d lost=%d, want 2, 1, 1: %s", r.Effects, r.Duplicated, r.Lost, r.Line())
	}
	p.shipments["o-9"] = 1
	if fx, err = p.effects(want); err != nil {
		t.Fatal(err)
	}
	if _, _, err := checkHistory(context.Background(), dir, memstoretest.New(t), fx, nil); err == nil || strings.Contains(err.Error(), "o-9") {
		t.Fatalf("a shipment under a key with no calls: %v, want an error naming its hash", err)
	}
}

// A malformed message's record left PENDING (its worker killed after the
// dead letter was sent, before the failure was recorded) is not counted
// as left PENDING; a valid order's is.
func TestUnrecordedDeadLettersCountOnlyMalformed(t *testing.T) {
	ctx := context.Background()
	st := memstoretest.New(t)
	now := time.Now()
	for _, id := range []string{"bad-key-0", "o-1"} {
		k, err := dedup.Key(workerNamespace, id) // as the order worker keys its records
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Claim(ctx, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "w", Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	bad := `not json 0`
	ds := []delivery{{body: bad, key: "bad-key-0"}, {body: `{"order_id":"o-1"}`, key: "o-1"}, {body: `not json 2`}}
	want := expected{malformed: map[string]bool{bad: true, `not json 2`: true}}
	res := &result{pending: 2}
	if err := unrecordedDeadLetters(ctx, st, ds, want, res); err != nil {
		t.Fatal(err)
	}
	if res.pending != 1 || res.deadLettersUnrecorded != 1 {
		t.Fatalf("pending %d, dead letters unrecorded %d; want 1 and 1 (the valid order's record still counts)", res.pending, res.deadLettersUnrecorded)
	}
}
