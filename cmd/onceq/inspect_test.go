package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkasource"
)

// newTable creates a table with create-table, as an operator would, and
// opens a store over it.
func newTable(t *testing.T, tenant bool) (string, *dynamostore.Store) {
	t.Helper()
	c := localAWS(t)
	table := tableName(t)
	args := []string{"create-table", "-table", table}
	if tenant {
		args = append(args, "-tenant-layout")
	}
	if code, _, errOut := onceq(args...); code != 0 {
		t.Fatalf("create-table: exit %d: %s", code, errOut)
	}
	store, err := openStore(c, table, tenant)
	if err != nil {
		t.Fatal(err)
	}
	return table, store
}

// fill claims n keys of other messages, so that a lookup has to pick its
// record out of many.
func fill(t *testing.T, store *dynamostore.Store, ns string, n int) {
	t.Helper()
	for i := range n {
		// A claim's Now is read just before it, as a consumer does: the
		// store refuses one that is stale beyond its clock check's slack.
		now := time.Now()
		key, err := dedup.Key(ns, fmt.Sprintf("other-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Claim(t.Context(), dedup.ClaimRequest{Key: key, PayloadHash: "h", Owner: "w",
			Now: now, LeaseUntil: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
}

var keyHashInLog = regexp.MustCompile(`key_hash=([0-9a-f]+)`)

// failOnce runs a message whose handler fails through a Guard in namespace
// ns, and returns the key_hash of the Guard's log line about it: what an
// operator would copy out of the logs.
func failOnce(t *testing.T, store dedup.Store, ns, id string) string {
	t.Helper()
	var logs testenv.LogBuffer
	g, err := consumer.NewGuard(store, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{}, errors.New("card declined")
	}), consumer.Namespace(ns), consumer.WithLogger(logs.Logger(slog.LevelDebug)))
	if err != nil {
		t.Fatal(err)
	}
	m := &consumer.Message{ID: "m-" + id, Body: []byte("body of " + id), Deliveries: 1,
		Attributes: map[string]string{consumer.IdempotencyKeyAttribute: id}}
	if o := g.Process(t.Context(), m); o.Kind != consumer.Retrying {
		t.Fatalf("outcome %v (%v), want Retrying", o.Kind, o.Err)
	}
	found := keyHashInLog.FindStringSubmatch(logs.String())
	if found == nil {
		t.Fatalf("no key_hash in the guard's log:\n%s", logs.String())
	}
	return found[1]
}

func TestInspectKeyHashFromLog(t *testing.T) {
	for _, tenant := range []bool{false, true} {
		t.Run(map[bool]string{false: "default layout", true: "tenant layout"}[tenant], func(t *testing.T) {
			table, store := newTable(t, tenant)
			fill(t, store, "orders", 20)
			h := failOnce(t, store, "orders", "order-42")
			args := []string{"inspect", "-table", table, "-key-hash", h}
			if tenant {
				args = append(args, "-tenant-layout")
			}
			code, out, errOut := onceq(args...)
			if code != 0 {
				t.Fatalf("%v: exit %d, err %q", args, code, errOut)
			}
			for _, want := range []string{"key:        orders#order-42", "status:     FAILED", "last error: ", "card declined"} {
				if !strings.Contains(out, want) {
					t.Errorf("%v lacks %q:\n%s", args, want, out)
				}
			}
			if !strings.Contains(errOut, "key_hash "+h+": a record in table "+table+", found by scanning 21 items (") {
				t.Errorf("%v: no scan summary on stderr: %q", args, errOut)
			}
		})
	}
}

func TestInspectKeyHashScanLimit(t *testing.T) {
	table, store := newTable(t, false)
	fill(t, store, "orders", 30)
	absent := dedup.KeyHash("orders#absent")

	code, out, errOut := onceq("inspect", "-table", table, "-key-hash", absent, "-scan-limit", "5")
	if code != 1 || out != "" || !strings.Contains(errOut, "key_hash "+absent+" not found within 5 items of table "+table) ||
		!strings.Contains(errOut, "raise -scan-limit") || !strings.Contains(errOut, "(-scan-limit 5;") {
		t.Errorf("scan limit 5 of 30 items: exit %d, out %q, err %q; want exit 1 saying the limit stopped the scan", code, out, errOut)
	}
	code, _, errOut = onceq("inspect", "-table", table, "-key-hash", absent)
	if code != 1 || !strings.Contains(errOut, "no record with key_hash "+absent+" in table "+table+": scanned all 30 items (") {
		t.Errorf("whole table: exit %d, err %q; want exit 1 after scanning all 30 items", code, errOut)
	}
}

// A fingerprint too long for the sort key is stored hashed: its key hash
// cannot be found by scanning, and the tool says why instead of only "not
// found".
func TestInspectKeyHashOfHashedKey(t *testing.T) {
	table, store := newTable(t, true)
	h := failOnce(t, store, "orders", strings.Repeat("k", 1500))
	code, _, errOut := onceq("inspect", "-table", table, "-tenant-layout", "-key-hash", h)
	if code != 1 || !strings.Contains(errOut, "1 of the items read store their key as a hash") {
		t.Errorf("hashed key: exit %d, err %q; want exit 1 naming the hashed item", code, errOut)
	}
}

// completeWith runs m through a Guard whose handler answers resp.
func completeWith(t *testing.T, store dedup.Store, m *consumer.Message, resp []byte, opts ...consumer.GuardOption) {
	t.Helper()
	g, err := consumer.NewGuard(store, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: resp}, nil
	}), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if o := g.Process(t.Context(), m); o.Kind != consumer.Processed {
		t.Fatalf("outcome %v (%v), want Processed", o.Kind, o.Err)
	}
}

func TestInspectResponse(t *testing.T) {
	table, store := newTable(t, false)
	text := []byte(`{"order":42,"charged":"12.50 EUR"}` + "\n")
	binary := []byte{0x00, 0xff, 0xfe, 'o', 'k', '\n', 0x80}
	completeWith(t, store, &consumer.Message{ID: "1", Body: []byte("a"), Deliveries: 1,
		Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "order-42"}}, text)
	completeWith(t, store, &consumer.Message{ID: "2", Body: []byte("b"), Deliveries: 1,
		Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "order-43"}}, binary)

	code, out, errOut := onceq("inspect", "-table", table, "order-42")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("response:   %d bytes (print them with -response)", len(text))) {
		t.Errorf("default output: exit %d, out %q, err %q; want the size and a pointer to -response", code, out, errOut)
	}
	code, out, errOut = onceq("inspect", "-table", table, "-response", "order-42")
	if code != 0 || out != string(text) || errOut != "" {
		t.Errorf("-response of text: exit %d, out %q, err %q; want exactly %q", code, out, errOut, text)
	}
	code, out, errOut = onceq("inspect", "-table", table, "-response", "-raw", "-key-hash", dedup.KeyHash("onceq#order-43"))
	if code != 0 || out != string(binary) || !strings.Contains(errOut, "7 bytes that are not printable UTF-8 text") {
		t.Errorf("-response -raw of binary: exit %d, out %q, err %q; want exactly %q and a note", code, out, errOut, binary)
	}
	code, out, errOut = onceq("inspect", "-table", table, "-response", "-key-hash", dedup.KeyHash("onceq#order-43"))
	if want := `\x00\xff\xfeok` + "\n" + `\x80`; code != 0 || out != want || !strings.Contains(errOut, "-raw") {
		t.Errorf("-response of binary: exit %d, out %q, err %q; want it escaped, %q, and a pointer to -raw", code, out, errOut, want)
	}
	// A record without a response prints nothing, and says so.
	fill(t, store, "onceq", 1)
	code, out, errOut = onceq("inspect", "-table", table, "-response", "other-0")
	if code != 0 || out != "" || !strings.Contains(errOut, "stores no response (status PENDING)") {
		t.Errorf("-response of PENDING: exit %d, out %q, err %q", code, out, errOut)
	}
}

func TestInspectKafkaFingerprint(t *testing.T) {
	table, store := newTable(t, false)
	value := []byte("{\"amount\": 1250}\n\x00raw")
	plain := kafkasource.ToMessage(kgo.Message{Topic: "payments", Partition: 2, Offset: 917,
		Key: []byte("cust-9"), Value: value}, 1)
	completeWith(t, store, plain, []byte("charged"), consumer.Namespace("billing"), consumer.WithSourceKey(kafkasource.Fingerprint, kafkasource.KeyCoversBody))
	withHeader := kafkasource.ToMessage(kgo.Message{Topic: "payments", Key: []byte("cust-9"), Value: []byte("other"),
		Headers: []kgo.Header{{Key: broker.IdempotencyKeyAttribute, Value: []byte("pay-77")}}}, 1)
	completeWith(t, store, withHeader, []byte("charged once"), consumer.Namespace("billing"), consumer.WithSourceKey(kafkasource.Fingerprint, kafkasource.KeyCoversBody))

	file := filepath.Join(t.TempDir(), "value")
	if err := os.WriteFile(file, value, 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"inspect", "-table", table, "-namespace", "billing", "-response"}
	cases := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"-kafka-topic", "payments", "-kafka-key", "cust-9", "-kafka-value-file", file}, 0, "charged"},
		{[]string{"-kafka-topic", "payments", "-kafka-key", "cust-9", "-kafka-value", string(value)}, 0, "charged"},
		{[]string{"-kafka-header-key", "pay-77"}, 0, "charged once"},
		// Any part of the record changed is another key.
		{[]string{"-kafka-topic", "payments", "-kafka-key", "cust-9", "-kafka-value", string(value[:len(value)-1])}, 1, ""},
		{[]string{"-kafka-topic", "payment", "-kafka-key", "cust-9", "-kafka-value-file", file}, 1, ""},
		{[]string{"-kafka-topic", "payments", "-kafka-value-file", file}, 1, ""},
	}
	for _, c := range cases {
		args := append(append([]string{}, base...), c.args...)
		code, out, errOut := onceq(args...)
		if code != c.code || out != c.out {
			t.Errorf("%v: exit %d, out %q, err %q; want exit %d, out %q", c.args, code, out, errOut, c.code, c.out)
		}
	}
}

func TestInspectUsage(t *testing.T) {
	h := dedup.KeyHash("onceq#k")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-key-hash", "xyz"}, "12 hex digits"},
		{[]string{"-key-hash", h, "k"}, "give one"},
		{[]string{"-key-hash", h, "-kafka-topic", "t"}, "give one"},
		{[]string{"-key-hash", h, "-stored-key"}, "-stored-key goes with KEY only"},
		{[]string{"-key-hash", h, "-namespace", "orders"}, "a key hash already covers the namespace"},
		{[]string{"-key-hash", h, "-scan-limit", "0"}, "-scan-limit must be at least 1"},
		{[]string{"-scan-limit", "10", "k"}, "-scan-limit goes with -key-hash only"},
		{[]string{"-kafka-key", "k"}, "-kafka-topic is required"},
		{[]string{"-shards", "4", "k"}, "-shards goes with the tenant layout"},
		{[]string{"-tenant-layout", "-shards", "1001", "k"}, "-shards 1 to 1000"},
		{[]string{"-tenant", "acme", "-stored-key", "acme#onceq#k"}, "the stored key has its tenant"},
		{[]string{"-tenant", "acme", "-limit", "5", "k"}, "-since and -limit go with -tenant and no KEY"},
		{[]string{"-kafka-topic", "t", "-kafka-value", "v", "-kafka-value-file", "f"}, "give one"},
	}
	for _, c := range cases {
		args := append([]string{"inspect", "-table", "t"}, c.args...)
		if code, _, errOut := onceq(args...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, err %q; want exit 2 with %q", c.args, code, errOut, c.want)
		}
	}
}

// TestInspectEscapesControlBytes: a key, handler error and response
// carrying terminal escape sequences are printed escaped, so stored bytes
// cannot forge output lines or drive the terminal.
func TestInspectEscapesControlBytes(t *testing.T) {
	table, store := newTable(t, false)
	hostile := "k\x1b]0;owned\x07\r\nstatus:     COMPLETED\x1b[2J\u009b1m"
	var logs testenv.LogBuffer
	g, err := consumer.NewGuard(store, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{}, errors.New("declined " + hostile)
	}), consumer.WithLogger(logs.Logger(slog.LevelDebug)))
	if err != nil {
		t.Fatal(err)
	}
	m := &consumer.Message{ID: "m-1", Body: []byte("b"), Deliveries: 1, Attributes: map[string]string{consumer.IdempotencyKeyAttribute: hostile}}
	if o := g.Process(t.Context(), m); o.Kind != consumer.Retrying {
		t.Fatalf("outcome %v (%v), want Retrying", o.Kind, o.Err)
	}
	completeWith(t, store, &consumer.Message{ID: "2", Body: []byte("c"), Deliveries: 1,
		Attributes: map[string]string{consumer.IdempotencyKeyAttribute: "resp"}}, []byte("ok \x1b[31mred\x1b[0m\n"))
	for _, args := range [][]string{
		{"inspect", "-table", table, hostile},
		{"inspect", "-table", table, "-key-hash", dedup.KeyHash("onceq#" + hostile)},
		{"inspect", "-table", table, "-response", "resp"},
		{"inspect", "-table", table, "nothing-" + hostile},
	} {
		_, out, errOut := onceq(args...)
		for _, s := range []string{out, errOut} {
			for _, r := range s {
				if r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0) {
					t.Errorf("%v printed control character %U: %q", args[3:], r, s)
					break
				}
			}
		}
		if args[3] == hostile && (!strings.Contains(out, `\x1b`) || strings.Count(out, "\nstatus:") != 1) {
			t.Errorf("record of a hostile key: %q; want the key and error escaped, one status line", out)
		}
	}
}
