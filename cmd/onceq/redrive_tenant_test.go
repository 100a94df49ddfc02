package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/sqssource"
)

func TestRedriveTenantUsage(t *testing.T) {
	pg := []string{"redrive", "-store", "postgres"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(pg, "-outbox", "-tenant", "acme"), "-outbox reads no record"},
		{append(pg, "-outbox", "-tenant-attribute", "tenant"), "-outbox reads no record"},
		{[]string{"redrive", "-table", "t", "-outbox", "-tenant-layout"}, "-outbox reads no record"},
		{append(pg, "-sqs-dlq", "u", "-tenant", "acme", "-tenant-attribute", "tenant"), "give one"},
		{append(pg, "-sqs-dlq", "u", "-tenant-attribute", "tenant", "-tenant-json-key", "tenant"), "give one"},
		{append(pg, "-sqs-dlq", "u", "-tenant-attribute", ""), "must not be empty"},
		{append(pg, "-sqs-dlq", "u", "-tenant-json-key", ""), "must not be empty"},
		{append(pg, "-sqs-dlq", "u", "-tenant", strings.Repeat("t", 257)), "tenant must be non-empty UTF-8 of at most 256 bytes"},
		{append(pg, "-sqs-dlq", "u", "-tenant", "acme", "-tenant-layout"), "-tenant-layout and -shards are DynamoDB's"},
		{[]string{"redrive", "-table", "t", "-sqs-dlq", "u", "-tenant", "acme", "-shards", "4"}, "-shards goes with -tenant-layout"},
		{[]string{"redrive", "-table", "t", "-sqs-dlq", "u", "-tenant-layout", "-shards", "0"}, "-shards 0: want 1 to 1000"},
	} {
		code, _, errOut := onceq(c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("onceq %s: exit %d, %q; want 2 and %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}

// tenantOf is a typical tenant function: the message's "tenant" attribute.
func tenantOf(m *consumer.Message) (string, error) {
	if t, ok := m.Attributes["tenant"]; ok {
		return t, nil
	}
	return "", errors.New("no tenant attribute")
}

// processed runs m through a consumer with tenantOf over st whose handler
// fails (fail) or succeeds, and returns the record it left.
func processed(t *testing.T, st dedup.Store, fail bool, m *consumer.Message) dedup.Record {
	t.Helper()
	want := consumer.Processed
	g, err := consumer.NewGuard(st, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		if fail {
			return consumer.Result{}, errors.New("card declined")
		}
		return consumer.Result{}, nil
	}), consumer.WithTenantFunc(tenantOf), consumer.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if fail {
		want = consumer.Retrying
	}
	if o := g.Process(t.Context(), m); o.Kind != want {
		t.Fatalf("outcome %v (%v), want %v", o.Kind, o.Err, want)
	}
	rec, err := st.Get(t.Context(), tenantKey(t, m.Attributes["tenant"], m.Attributes[broker.IdempotencyKeyAttribute]))
	if err != nil {
		t.Fatalf("the consumer's record: %v", err)
	}
	return rec
}

func tenantKey(t *testing.T, tenant, key string) string {
	t.Helper()
	k, err := dedup.TenantKey(tenant, mustKey(t, "onceq", key))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// sendLetters puts one dead letter in dlq per message, with its
// attributes and a reason.
func sendLetters(t *testing.T, q *awssqs.Client, dlq string, ms ...*consumer.Message) {
	t.Helper()
	for _, m := range ms {
		attrs := map[string]sqstypes.MessageAttributeValue{sqssource.ReasonAttribute: {DataType: aws.String("String"), StringValue: aws.String("handler: card declined")}}
		for k, v := range m.Attributes {
			attrs[k] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
		if _, err := q.SendMessage(t.Context(), &awssqs.SendMessageInput{QueueUrl: aws.String(dlq), MessageBody: aws.String(string(m.Body)), MessageAttributes: attrs}); err != nil {
			t.Fatal(err)
		}
	}
}

// tenantMessage is a message of key, of tenant ("": none) in its
// "tenant" attribute and in its JSON body.
func tenantMessage(tenant, key string) *consumer.Message {
	m := &consumer.Message{ID: key, Deliveries: 1, Body: []byte(`{"id":"` + key + `"}`), Attributes: map[string]string{broker.IdempotencyKeyAttribute: key}}
	if tenant != "" {
		m.Attributes["tenant"] = tenant
		m.Body = []byte(`{"tenant":"` + tenant + `","id":"` + key + `"}`)
	}
	return m
}

// wantReset: the record of key is the consumer's failed one, reset by a
// redrive (FAILED one version on, no attempts, claimable again).
func wantReset(t *testing.T, st dedup.Store, key string, before dedup.Record) {
	t.Helper()
	r, err := st.Get(t.Context(), key)
	if err != nil || r.Status != dedup.StatusFailed || r.Version != before.Version+1 || r.Attempts != 0 || !strings.Contains(r.LastError, "redriven from") {
		t.Fatalf("the failed record after the redrive: %+v, %v; want it reset (before: version %d)", r, err, before.Version)
	}
}

// onceq redrive -tenant-attribute over the records of a consumer with a
// tenant function, on every store: the failed message's letter is moved,
// its record (under its tenant) reset first; the completed one's is not
// re-run; another tenant's letter with the same idempotency key has no
// record and is moved; a letter without the attribute is left and
// counted. The letters left stay in the dead-letter queue. A dry run
// reading the tenant from the JSON body (-tenant-json-key) decides alike.
func TestRedriveSQSTenantAttribute(t *testing.T) {
	q := localSQS(t)
	for name, open := range redriveStores(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			qn, src, dlq := sqsPair(t, q)
			failed, done := tenantMessage("acme", "order-failed-"+qn), tenantMessage("acme", "order-done-"+qn)
			other, untenanted := tenantMessage("globex", "order-failed-"+qn), tenantMessage("", "order-none-"+qn)
			before := processed(t, s.st, true, failed)
			processed(t, s.st, false, done)
			sendLetters(t, q, dlq, failed, done, other, untenanted)

			args := append(append([]string{"redrive"}, s.args...), "-sqs-dlq", dlq, "-sqs-source", src)
			// The tenant read from the body instead: the same decisions.
			code, out, errOut := onceq(append(args, "-tenant-json-key", "tenant", "-dry-run")...)
			if code != 0 || !strings.Contains(out, "4 looked at: would move 2, 1 completed (not re-run), 0 held") || !strings.Contains(out, "1 naming no tenant (left)") {
				t.Fatalf("redrive -tenant-json-key -dry-run: exit %d, %s\n%s", code, out, errOut)
			}
			code, out, errOut = onceq(append(args, "-tenant-attribute", "tenant")...)
			if code != 0 || !strings.Contains(out, "4 looked at: moved 2, 1 completed (not re-run), 0 held") || !strings.Contains(out, "1 naming no tenant (left)") {
				t.Fatalf("redrive: exit %d, %s\n%s", code, out, errOut)
			}
			if !strings.Contains(errOut, "it carries no attribute or header tenant") {
				t.Errorf("the log does not say why the letter without a tenant was left:\n%s", errOut)
			}
			wantReset(t, s.st, tenantKey(t, "acme", "order-failed-"+qn), before)
			got := map[string]bool{}
			for _, m := range drain(t, q, src, 2) {
				got[aws.ToString(m.Body)] = true
			}
			if len(got) != 2 || !got[string(failed.Body)] || !got[string(other.Body)] {
				t.Fatalf("the source queue got %v, want the failed letter and the other tenant's", got)
			}
			if n := queueDepth(t, q, dlq); n != 2 {
				t.Fatalf("the dead-letter queue holds %d, want the completed letter and the one without a tenant", n)
			}
		})
	}
}

// onceq redrive -kafka-dlt -tenant: every letter is that tenant's; the
// failed one's record is reset and the letter moved, the completed one's
// letter is not re-run. Letters without the tenant header a run reads
// (-tenant-attribute) are left for a later run in the group.
func TestRedriveKafkaTenant(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	s := redriveStores(t)["postgres"](t)
	name := tableName(t)
	orig, dlt := name+"-orders", name+"-orders-dlt"
	cl := redriveKafka(t, brokers)
	keys := deadLetters(t, cl, orig, dlt, "order-failed", "order-done")
	now := time.Now()
	failedKey, err := dedup.TenantKey("acme", keys[0])
	if err != nil {
		t.Fatal(err)
	}
	doneKey, err := dedup.TenantKey("acme", keys[1])
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.st.Claim(t.Context(), dedup.ClaimRequest{Key: failedKey, Owner: "w", Now: now, LeaseUntil: now.Add(time.Hour)})
	if err == nil {
		err = s.st.Fail(t.Context(), dedup.FailRequest{Lease: c.Lease, Reason: "poison", Now: now, RetryAt: now.Add(time.Hour), DeadLetter: true})
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: doneKey, Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	before, err := s.st.Get(t.Context(), failedKey)
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"redrive"}, s.args...), "-kafka-dlt", dlt, "-kafka-brokers", brokers)
	// Read by a header the letters lack: both left, the group's offsets
	// short of them.
	code, out, errOut := onceq(append(args, "-tenant-attribute", "tenant")...)
	if code != 0 || !strings.Contains(out, "2 looked at: moved 0, 0 completed") || !strings.Contains(out, "2 naming no tenant (left)") {
		t.Fatalf("redrive -tenant-attribute: exit %d, %s\n%s", code, out, errOut)
	}
	if r, err := s.st.Get(t.Context(), failedKey); err != nil || r.Version != before.Version {
		t.Fatalf("the failed record after a run that left its letter: %+v, %v; want it untouched", r, err)
	}
	// The next run in the group finds them again.
	code, out, errOut = onceq(append(args, "-tenant", "acme")...)
	if code != 0 || !strings.Contains(out, "2 looked at: moved 1, 1 completed (not re-run)") {
		t.Fatalf("redrive: exit %d, %s\n%s", code, out, errOut)
	}
	if r, err := s.st.Get(t.Context(), failedKey); err != nil || r.Status != dedup.StatusFailed || r.Version != before.Version+1 {
		t.Fatalf("the failed record after the redrive: %+v, %v; want it reset", r, err)
	}
	if got := readTopic(t, brokers, orig, 1); len(got) != 1 || string(got[0].Key) != "order-failed" {
		t.Fatalf("%s holds %d records, want the failed letter alone", orig, len(got))
	}
}

// A consumer over a DynamoDB table in the tenant layout with
// TenantShards(4): redrive -tenant-layout -shards 4 finds each record in
// its shard. Without -tenant-layout the table refuses the key, the run
// stops saying so, and the letters stay.
func TestRedriveTenantShardedTable(t *testing.T) {
	q := localSQS(t)
	table, st := shardedTable(t, 4)
	qn, src, dlq := sqsPair(t, q)
	failed, done := tenantMessage("acme", "order-failed-"+qn), tenantMessage("acme", "order-done-"+qn)
	before := processed(t, st, true, failed)
	processed(t, st, false, done)
	sendLetters(t, q, dlq, failed, done)
	args := []string{"redrive", "-table", table, "-sqs-dlq", dlq, "-sqs-source", src, "-tenant-attribute", "tenant"}

	code, _, errOut := onceq(args...)
	if code != 1 || !strings.Contains(errOut, "give -tenant-layout for a table made with it") {
		t.Fatalf("redrive without -tenant-layout: exit %d\n%s\nwant exit 1 naming -tenant-layout", code, errOut)
	}
	if n := queueDepth(t, q, src); n != 0 {
		t.Fatalf("the refused run moved %d letters", n)
	}

	code, out, errOut := onceq(append(args, "-tenant-layout", "-shards", "4")...)
	if code != 0 || !strings.Contains(out, "2 looked at: moved 1, 1 completed (not re-run)") {
		t.Fatalf("redrive -tenant-layout -shards 4: exit %d, %s\n%s", code, out, errOut)
	}
	wantReset(t, st, tenantKey(t, "acme", "order-failed-"+qn), before)
	if got := drain(t, q, src, 1); len(got) != 1 || aws.ToString(got[0].Body) != string(failed.Body) {
		t.Fatalf("the source queue got %d messages, want the failed letter", len(got))
	}
	if n := queueDepth(t, q, dlq); n != 1 {
		t.Fatalf("the dead-letter queue holds %d, want the completed letter", n)
	}
}

var formToken = regexp.MustCompile(`name="token" value="([0-9a-f]+)"`)

// letterForm loads the confirmation of the record of key's dead letter
// redrive, and posts it as the page would.
func letterForm(t *testing.T, base, key string) (int, string) {
	t.Helper()
	get, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/redrive-letter?stored_key="+url.QueryEscape(key), nil)
	res, err := http.DefaultClient.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return res.StatusCode, string(page)
	}
	m := formToken.FindSubmatch(page)
	if m == nil {
		t.Fatalf("no token in the confirmation:\n%s", page)
	}
	r, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/redrive-letter",
		strings.NewReader(url.Values{"stored_key": {key}, "token": {string(m[1])}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Origin", base)
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	res, err = http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// The console redrives a tenant's dead letter when told where each
// letter's tenant is (-tenant-attribute): the letter of that tenant is
// sent back, its record reset, and another tenant's letter with the same
// idempotency key is left. A console not told refuses a tenant's record,
// saying why; one told refuses a record without a tenant.
func TestConsoleRedrivesTenantLetter(t *testing.T) {
	q := localSQS(t)
	s := redriveStores(t)["postgres"](t)
	qn, src, dlq := sqsPair(t, q)
	failed, other := tenantMessage("acme", "order-"+qn), tenantMessage("globex", "order-"+qn)
	before := processed(t, s.st, true, failed)
	processed(t, s.st, true, other)
	sendLetters(t, q, dlq, failed, other)
	key := tenantKey(t, "acme", "order-"+qn)
	args := append(s.args, "-actions", "-sqs-dlq", dlq, "-sqs-source", src)

	plain := startConsole(t, args...)
	if status, body := letterForm(t, plain, key); status != http.StatusForbidden || !strings.Contains(body, "this record is a tenant") || !strings.Contains(body, "-tenant-attribute") {
		t.Fatalf("a console not told where the tenant is: status %d, want 403 naming -tenant-attribute:\n%s", status, body)
	}

	base := startConsole(t, append(args, "-tenant-attribute", "tenant")...)
	status, body := letterForm(t, base, key)
	if status != http.StatusOK || !strings.Contains(body, "1 dead letter(s) sent back to the source, the record reset first") {
		t.Fatalf("the tenant's letter: status %d:\n%s", status, body)
	}
	wantReset(t, s.st, key, before)
	if got := drain(t, q, src, 1); len(got) != 1 || aws.ToString(got[0].Body) != string(failed.Body) {
		t.Fatalf("the source queue got %d messages, want acme's letter alone", len(got))
	}
	if n := queueDepth(t, q, dlq); n != 1 {
		t.Fatalf("the dead-letter queue holds %d, want globex's letter", n)
	}
	if status, body := letterForm(t, base, mustKey(t, "onceq", "order-"+qn)); status != http.StatusForbidden || !strings.Contains(body, "this record has no tenant") {
		t.Fatalf("a record without a tenant on a console told where tenants are: status %d:\n%s", status, body)
	}
}

// The console's tenant flags go with a dead-letter queue or topic, one
// at a time.
func TestConsoleTenantLettersUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"console", "-table", "t", "-actions", "-tenant-attribute", "tenant"}, "they go with -sqs-dlq or -kafka-dlt"},
		{[]string{"console", "-table", "t", "-actions", "-sqs-dlq", "u", "-tenant-attribute", "tenant", "-tenant-json-key", "tenant"}, "give one"},
	} {
		code, _, errOut := onceq(c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("onceq %s: exit %d, %q; want 2 and %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}
