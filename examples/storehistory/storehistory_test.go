package storehistory_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/examples/storehistory"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// events parses what a Recorder wrote to buf.
func events(t *testing.T, buf *testenv.LogBuffer) []storehistory.Event {
	t.Helper()
	var es []storehistory.Event
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var e storehistory.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		es = append(es, e)
	}
	return es
}

// blocking holds Claim until release is closed, then fails it.
type blocking struct {
	dedup.Store
	entered, release chan struct{}
}

func (b blocking) Claim(context.Context, dedup.ClaimRequest) (dedup.Claim, error) {
	close(b.entered)
	<-b.release
	return dedup.Claim{}, errors.New("connection reset")
}

// A call is on record before the Store sees it, so that a process killed
// during the call leaves it in its history; an error that leaves the
// effect open is recorded as unknown.
func TestCallWrittenBeforeTheStoreCall(t *testing.T) {
	var buf testenv.LogBuffer
	st := blocking{memstoretest.New(t), make(chan struct{}), make(chan struct{})}
	rec := storehistory.New(st, &buf)
	done := make(chan struct{})
	now := time.Unix(100, 0)
	go func() {
		defer close(done)
		_, _ = rec.Claim(context.Background(), dedup.ClaimRequest{Key: "k", Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
	}()
	<-st.entered
	es := events(t, &buf)
	if len(es) != 1 || es[0].Kind != storehistory.KindCall || es[0].Op != storehistory.OpClaim || es[0].Owner != "a" || es[0].Now != now.UnixNano() {
		t.Fatalf("before the store returned: %+v", es)
	}
	close(st.release)
	<-done
	es = events(t, &buf)
	if len(es) != 2 || es[1].Kind != storehistory.KindReturn || es[1].ID != es[0].ID || es[1].Outcome != storehistory.OutcomeUnknown || es[1].Time < es[0].Time {
		t.Fatalf("after: %+v", es)
	}
}

// Only the errors by which a Store says it changed nothing are a definite
// outcome.
func TestOutcomes(t *testing.T) {
	ctx := context.Background()
	var buf testenv.LogBuffer
	rec := storehistory.New(memstoretest.New(t), &buf)
	now := time.Unix(100, 0)
	c, err := rec.Claim(ctx, dedup.ClaimRequest{Key: "k", Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = rec.Claim(ctx, dedup.ClaimRequest{Key: "k", Owner: "b", Now: now, LeaseUntil: now.Add(time.Minute)})
	_ = rec.Extend(ctx, dedup.ExtendRequest{Lease: dedup.Lease{Key: "k", Owner: "b", Version: 1}, Now: now, LeaseUntil: now.Add(time.Hour)})
	refuse := memstore.Write{Check: func() error { return fmt.Errorf("out of stock") }}
	_ = rec.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Now: now, ExpiresAt: now.Add(time.Hour), Writes: []dedup.Write{refuse}})
	_ = rec.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Now: now, ExpiresAt: now.Add(time.Hour), Writes: []dedup.Write{foreignWrite("not a memstore write")}})
	_, _ = rec.Get(ctx, "absent")
	_, _ = rec.Get(ctx, "k")

	var got []string
	for _, e := range events(t, &buf) {
		if e.Kind != storehistory.KindReturn {
			continue
		}
		s := e.Op + ":" + e.Outcome
		if e.Record != nil {
			s += fmt.Sprintf(":%s/%d/%s", e.Record.Status, e.Record.Version, e.Record.Owner)
		}
		got = append(got, s)
	}
	want := []string{
		"claim:ok:PENDING/1/a", // acquired: what it wrote
		"claim:ok:PENDING/1/a", // not acquired: what it met
		"extend:fail",          // not b's lease
		"complete:refused",     // a business condition
		"complete:unknown",     // any other error
		"get:fail",             // not found
		"get:ok:PENDING/1/a",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("returns\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
}

// foreignWrite is a business write of no Store this test runs.
type foreignWrite string

func (foreignWrite) WriteKind() dedup.WriteKind { return "foreign" }
