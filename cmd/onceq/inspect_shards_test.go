package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/payload"
)

// shardedTable makes a tenant-layout table with create-table and opens the
// store a consumer with TenantShards(shards) would use over it.
func shardedTable(t *testing.T, shards int) (string, *dynamostore.Store) {
	t.Helper()
	c := localAWS(t)
	table := tableName(t)
	if code, _, errOut := onceq("create-table", "-table", table, "-tenant-layout"); code != 0 {
		t.Fatalf("create-table: %s", errOut)
	}
	st, err := dynamostore.New(c, dynamostore.WithTable(table), dynamostore.TenantLayout(), dynamostore.TenantShards(shards))
	if err != nil {
		t.Fatal(err)
	}
	return table, st
}

// A record of a TenantShards table, written by a consumer, is found by
// its key (with -tenant and -shards), by its stored key (with -shards) and
// by the key_hash of the consumer's log line (the scan needs no -shards),
// and printed with the consumer's key. A lookup by key without -shards
// says it may be the missing flag.
func TestInspectShardedTenantTable(t *testing.T) {
	table, st := shardedTable(t, 4)
	guard := func(l *slog.Logger) *consumer.Guard {
		g, err := consumer.NewGuard(st, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
			return consumer.Result{}, errors.New("card declined")
		}), consumer.Namespace("orders"), consumer.WithKeyFunc(payload.JSONKey("id")), consumer.WithTenantFunc(payload.JSONKey("tenant")),
			consumer.WithLogger(l))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	others := guard(testenv.Logger(t))
	for i := range 12 { // other records, over every shard
		m := &consumer.Message{ID: fmt.Sprint(i), Deliveries: 1, Body: fmt.Appendf(nil, `{"tenant":"acme","id":"other-%d"}`, i)}
		if o := others.Process(t.Context(), m); o.Kind != consumer.Retrying {
			t.Fatalf("outcome %v (%v)", o.Kind, o.Err)
		}
	}
	var logs testenv.LogBuffer
	m := &consumer.Message{ID: "m", Deliveries: 1, Body: []byte(`{"tenant":"acme","id":"order-42"}`)}
	if o := guard(logs.Logger(slog.LevelDebug)).Process(t.Context(), m); o.Kind != consumer.Retrying {
		t.Fatalf("outcome %v (%v)", o.Kind, o.Err)
	}
	found := keyHashInLog.FindStringSubmatch(logs.String())
	if found == nil {
		t.Fatalf("no key_hash in the guard's log:\n%s", logs.String())
	}
	inner, _ := dedup.Key("orders", "order-42")
	key, err := dedup.TenantKey("acme", inner)
	if err != nil {
		t.Fatal(err)
	}
	if h := found[1]; h != dedup.KeyHash(key) {
		t.Fatalf("the consumer logged key_hash %s, want %s", h, dedup.KeyHash(key))
	}
	for _, args := range [][]string{
		{"-tenant-layout", "-shards", "4", "-tenant", "acme", "-namespace", "orders", "order-42"},
		{"-tenant-layout", "-shards", "4", "-stored-key", key},
		{"-tenant-layout", "-key-hash", dedup.KeyHash(key)},
	} {
		code, out, errOut := onceq(append([]string{"inspect", "-table", table}, args...)...)
		if code != 0 || !strings.Contains(out, "key:        "+key+"\n") || !strings.Contains(out, "card declined") {
			t.Errorf("inspect %v: exit %d, out %q, err %q; want the record with key %s", args, code, out, errOut, key)
		}
	}
	code, _, errOut := onceq("inspect", "-table", table, "-tenant-layout", "-stored-key", key)
	if code != 1 || !strings.Contains(errOut, "-shards") {
		t.Errorf("inspect by stored key without -shards: exit %d, err %q; want exit 1 naming -shards", code, errOut)
	}
}

// -limit says when it cut the listing short, and only then.
func TestInspectTenantLimitTruncated(t *testing.T) {
	table, st := shardedTable(t, 2)
	for i := range 3 {
		now := time.Now()
		key, err := dedup.TenantKey("acme", fmt.Sprintf("onceq#a%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: key, Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := onceq("inspect", "-table", table, "-tenant", "acme", "-shards", "2", "-limit", "2")
	if code != 0 || strings.Count(out, "status:") != 2 || !strings.Contains(errOut, "-limit 2") || !strings.Contains(errOut, "more") {
		t.Errorf("-limit 2 of 3: exit %d, out %q, err %q; want 2 records and a note that there are more", code, out, errOut)
	}
	code, out, errOut = onceq("inspect", "-table", table, "-tenant", "acme", "-shards", "2", "-limit", "3")
	if code != 0 || strings.Count(out, "status:") != 3 || strings.Contains(errOut, "more") {
		t.Errorf("-limit 3 of 3: exit %d, out %q, err %q; want 3 records and no truncation note", code, out, errOut)
	}
}

// -tenant on a table of the default layout is an error naming the
// layout, not an empty listing.
func TestInspectTenantOnDefaultTable(t *testing.T) {
	table, _ := newTable(t, false)
	code, out, errOut := onceq("inspect", "-table", table, "-tenant", "acme")
	if code != 1 || out != "" || !strings.Contains(errOut, "tenant layout") || strings.Contains(errOut, "0 records") {
		t.Errorf("-tenant on a default-layout table: exit %d, out %q, err %q; want exit 1 naming the layout", code, out, errOut)
	}
}

// Unicode bidirectional controls in a key, an error or a response are
// printed escaped as control bytes are: they would reorder what the
// terminal shows (a key that reads as another).
func TestInspectEscapesBidiControls(t *testing.T) {
	table, store := newTable(t, false)
	bidi := "k\u202eFAILED\u202c\u2066x\u2069\u202a\u202b\u202d\u2067\u2068"
	g, err := consumer.NewGuard(store, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{}, errors.New("declined " + bidi)
	}), consumer.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	m := &consumer.Message{ID: "m-1", Body: []byte("b"), Deliveries: 1, Attributes: map[string]string{consumer.IdempotencyKeyAttribute: bidi}}
	if o := g.Process(t.Context(), m); o.Kind != consumer.Retrying {
		t.Fatalf("outcome %v (%v), want Retrying", o.Kind, o.Err)
	}
	completeWith(t, store, &consumer.Message{ID: "2", Body: []byte("c"), Deliveries: 1,
		Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "resp"}}, []byte("ok "+bidi))
	for _, args := range [][]string{
		{"inspect", "-table", table, bidi},
		{"inspect", "-table", table, "-key-hash", dedup.KeyHash("onceq#" + bidi)},
		{"inspect", "-table", table, "-response", "resp"},
		{"inspect", "-table", table, "nothing-" + bidi},
	} {
		code, out, errOut := onceq(args...)
		for _, s := range []string{out, errOut} {
			if i := strings.IndexFunc(s, func(r rune) bool { return unicode.Is(unicode.Bidi_Control, r) }); i >= 0 {
				t.Errorf("%v printed a bidirectional control: %q", args[3:], s)
			}
		}
		if code == 0 && !strings.Contains(out, `\u202e`) {
			t.Errorf("%v: %q; want the controls escaped (\\u202e)", args[3:], out)
		}
	}
}
