package audit_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/goleak"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/dynamostore/audit"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/metrictest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// auditRig is a records table with its stream, an archive table, and an
// Auditor of the stream that takes every delete for TTL's (DynamoDB
// Local's sweeper does not run: tests delete by hand).
type auditRig struct {
	client         *ddb.Client
	table, archive string
	auditor        *audit.Auditor
	reader         *metrictest.Reader
	mp             metric.MeterProvider
	logs           *testenv.LogBuffer
}

func newAuditRig(t *testing.T) *auditRig {
	t.Helper()
	ep := testenv.DynamoDBEndpoint(t)
	r := &auditRig{client: dynamoClient(t, ep), logs: &testenv.LogBuffer{}}
	r.reader, r.mp = metrictest.Provider(t)
	r.table = recordsTable(t, r.client, dynamostore.WithStream())
	r.archive = recordsTable(t, r.client)
	streams := dynamodbstreams.NewFromConfig(awstest.Config(t, ep), func(o *dynamodbstreams.Options) { o.BaseEndpoint = aws.String(ep) })
	var err error
	r.auditor, err = audit.New(r.client, streams, r.table, r.archive,
		audit.AnyDeleteIsTTL(), audit.FromStreamStart(),
		audit.WithMeterProvider(r.mp), audit.WithLogger(r.logs.Logger(slog.LevelInfo)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// completed claims and completes key in the records table as owner.
func (r *auditRig) completed(t *testing.T, st *dynamostore.Store, key, owner string, now time.Time) {
	t.Helper()
	c := mustClaim(t, st, dedup.ClaimRequest{Key: key, PayloadHash: "h", Owner: owner, Now: now, LeaseUntil: now.Add(30 * time.Second)})
	if !c.Acquired {
		t.Fatalf("claim by %s: %+v", owner, c)
	}
	if err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: c.Lease, Response: []byte("ok"), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
}

// sweep deletes key's record as the TTL sweeper would.
func (r *auditRig) sweep(t *testing.T, key string) {
	t.Helper()
	if _, err := r.client.DeleteItem(t.Context(), &ddb.DeleteItemInput{TableName: aws.String(r.table),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}}}); err != nil {
		t.Fatal(err)
	}
}

// tombstone reports whether the archive holds key's tombstone.
func (r *auditRig) tombstone(t *testing.T, key string) bool {
	t.Helper()
	out, err := r.client.GetItem(t.Context(), &ddb.GetItemInput{TableName: aws.String(r.archive), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}}})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Item) > 0
}

// until polls the stream until cond holds.
func (r *auditRig) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, what, func() bool {
		if err := r.auditor.Poll(t.Context()); err != nil {
			t.Fatalf("poll: %v", err)
		}
		return cond()
	})
}

func (r *auditRig) counter(t *testing.T, name string, want ...attribute.KeyValue) int64 {
	return metrictest.Counter(t, r.reader, name, want...)
}

// lag is how many TTL lags the histogram holds, and their sum.
func (r *auditRig) lag(t *testing.T) (uint64, float64) {
	t.Helper()
	return metrictest.Histogram(t, r.reader, "onceq.dynamodb.ttl_lag")
}

// A COMPLETED key removed as if by TTL, then claimed again: with the
// archive option the claim is a duplicate (not acquired, Archived, no
// response) and counted; without it the key is processed again and the
// count stays 0. The TTL lag of the removal is reported.
func TestAuditLateDuplicateAnsweredFromArchive(t *testing.T) {
	r := newAuditRig(t)
	with := newStore(t, r.client, r.table, dynamostore.WithArchive(r.archive), dynamostore.WithMeterProvider(r.mp), dynamostore.WithoutClockCheck())
	without := newStore(t, r.client, r.table, dynamostore.WithoutClockCheck())
	now := time.Now().Truncate(time.Second)
	kWith, kWithout := uniqueKey(t), uniqueKey(t)
	r.completed(t, with, kWith, "first", now)
	r.completed(t, without, kWithout, "first", now)
	r.sweep(t, kWith)
	r.sweep(t, kWithout)
	r.until(t, "tombstones of both removed COMPLETED records", func() bool { return r.tombstone(t, kWith) && r.tombstone(t, kWithout) })

	later := now.Add(2 * time.Hour)
	c := mustClaim(t, with, dedup.ClaimRequest{Key: kWith, PayloadHash: "h", Owner: "late", Now: later, LeaseUntil: later.Add(30 * time.Second)})
	if c.Acquired || !c.Archived || c.Existing.Status != dedup.StatusCompleted || len(c.Existing.Response) != 0 {
		t.Fatalf("late duplicate with the archive: %+v, want not acquired, Archived, COMPLETED without response", c)
	}
	if n := r.counter(t, "onceq.dynamodb.ttl_delete_before_retry", attribute.String("onceq.archive.evidence", "tombstone")); n != 1 {
		t.Errorf("ttl_delete_before_retry{evidence=tombstone} %d, want 1", n)
	}
	// A second late copy finds the record the first left: still a duplicate.
	if c := mustClaim(t, with, dedup.ClaimRequest{Key: kWith, PayloadHash: "h", Owner: "later", Now: later, LeaseUntil: later.Add(30 * time.Second)}); c.Acquired {
		t.Fatalf("second late copy acquired: %+v", c)
	}

	c = mustClaim(t, without, dedup.ClaimRequest{Key: kWithout, PayloadHash: "h", Owner: "late", Now: later, LeaseUntil: later.Add(30 * time.Second)})
	if !c.Acquired || c.Archived {
		t.Fatalf("late duplicate without the archive: %+v, want acquired (processed again)", c)
	}
	if n := r.counter(t, "onceq.dynamodb.ttl_delete_before_retry"); n != 1 {
		t.Errorf("ttl_delete_before_retry %d after the store without the archive, want still 1", n)
	}
	if n, sum := r.lag(t); n < 2 || sum > 0 {
		// Removed before expires_at (an hour ahead): negative lags.
		t.Errorf("TTL lag: %d samples, sum %v s, want ≥ 2 negative", n, sum)
	}
}

// An expired COMPLETED record still present (TTL lagging) is a duplicate
// with the archive option, without a tombstone: counted with
// onceq.archive.evidence=expired_record (a tombstone's answer is
// evidence=tombstone) and logged as such, not as a record TTL removed.
func TestArchiveExpiredCompletedIsDuplicate(t *testing.T) {
	r := newAuditRig(t)
	st := newStore(t, r.client, r.table, dynamostore.WithArchive(r.archive), dynamostore.WithMeterProvider(r.mp), dynamostore.WithoutClockCheck(),
		dynamostore.WithLogger(r.logs.Logger(slog.LevelInfo)))
	now := time.Now().Truncate(time.Second)
	k := uniqueKey(t)
	r.completed(t, st, k, "first", now)
	later := now.Add(3 * time.Hour)
	c := mustClaim(t, st, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: "late", Now: later, LeaseUntil: later.Add(30 * time.Second)})
	if c.Acquired || !c.Archived {
		t.Fatalf("claim of an expired COMPLETED record: %+v, want a duplicate", c)
	}
	if n := r.counter(t, "onceq.dynamodb.ttl_delete_before_retry", attribute.String("onceq.archive.evidence", "expired_record")); n != 1 {
		t.Errorf("ttl_delete_before_retry{evidence=expired_record} %d, want 1", n)
	}
	if n := r.counter(t, "onceq.dynamodb.ttl_delete_before_retry", attribute.String("onceq.archive.evidence", "tombstone")); n != 0 {
		t.Errorf("ttl_delete_before_retry{evidence=tombstone} %d, want 0: nothing was removed", n)
	}
	if logs := r.logs.String(); strings.Contains(logs, "removed by TTL") || !strings.Contains(logs, "expired") {
		t.Errorf("log of the duplicate: %s; want it to say the record expired, not that TTL removed it", logs)
	}
}

// A COMPLETED record overwritten by another owner's COMPLETED (a second
// region's write), and a key completed again after its tombstone, are
// each counted as a doubled completion and logged with the key hash.
func TestAuditDoubledCompletions(t *testing.T) {
	r := newAuditRig(t)
	st := newStore(t, r.client, r.table, dynamostore.WithoutClockCheck())
	now := time.Now().Truncate(time.Second)

	k1 := uniqueKey(t)
	r.completed(t, st, k1, "east", now)
	out, err := r.client.GetItem(t.Context(), &ddb.GetItemInput{TableName: aws.String(r.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: k1}}})
	if err != nil {
		t.Fatal(err)
	}
	out.Item["owner"] = &types.AttributeValueMemberS{Value: "west"}
	if _, err := r.client.PutItem(t.Context(), &ddb.PutItemInput{TableName: aws.String(r.table), Item: out.Item}); err != nil {
		t.Fatal(err)
	}
	r.until(t, "the overwritten completion counted", func() bool { return r.counter(t, "onceq.dynamodb.doubled_completions") == 1 })
	if !strings.Contains(r.logs.String(), "key_hash="+dedup.KeyHash(k1)) {
		t.Errorf("no WARN with the key hash: %s", r.logs.String())
	}
	if strings.Contains(r.logs.String(), k1) {
		t.Error("the key itself was logged")
	}

	k2 := uniqueKey(t)
	r.completed(t, st, k2, "first", now)
	r.sweep(t, k2)
	r.until(t, "tombstone of the removed completion", func() bool { return r.tombstone(t, k2) })
	later := now.Add(2 * time.Hour)
	r.completed(t, st, k2, "second", later)
	r.until(t, "the second completion counted", func() bool { return r.counter(t, "onceq.dynamodb.doubled_completions") == 2 })

	// The same owner's record rewritten (a retry, a heartbeat) is not doubled.
	k3 := uniqueKey(t)
	r.completed(t, st, k3, "only", now)
	r.sweep(t, k3)
	r.until(t, "tombstone of k3", func() bool { return r.tombstone(t, k3) })
	if n := r.counter(t, "onceq.dynamodb.doubled_completions"); n != 2 {
		t.Errorf("doubled completions %d, want 2", n)
	}
}

// Only a delete by DynamoDB's TTL service (userIdentity Service,
// dynamodb.amazonaws.com) is archived by default; an operator's delete is
// not. (auditlambda.Handler hands a Lambda stream event to
// ApplyStreamRecords.)
func TestAuditTTLPrincipalRule(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	client := dynamoClient(t, ep)
	archive := recordsTable(t, client)
	a, err := audit.New(client, nil, "records", archive)
	if err != nil {
		t.Fatal(err)
	}
	s := func(v string) stypes.AttributeValue { return &stypes.AttributeValueMemberS{Value: v} }
	n := func(v string) stypes.AttributeValue { return &stypes.AttributeValueMemberN{Value: v} }
	at := time.Unix(1700003700, 0)
	rec := func(key string, id *stypes.Identity) stypes.Record {
		return stypes.Record{EventName: stypes.OperationTypeRemove, UserIdentity: id, Dynamodb: &stypes.StreamRecord{
			ApproximateCreationDateTime: &at,
			Keys:                        map[string]stypes.AttributeValue{"pk": s(key)},
			OldImage: map[string]stypes.AttributeValue{
				"pk": s(key), "status": s("COMPLETED"), "version": n("2"), "owner": s("o"),
				"payload_hash": s("h"), "attempts": n("1"), "created_at": n("1700000000"), "expires_at": n("1700000100"),
			},
		}}
	}
	byTTL, byHand := uniqueKey(t), uniqueKey(t)
	if err := a.ApplyStreamRecords(t.Context(), []stypes.Record{
		rec(byTTL, &stypes.Identity{Type: aws.String("Service"), PrincipalId: aws.String("dynamodb.amazonaws.com")}),
		rec(byHand, nil),
	}); err != nil {
		t.Fatal(err)
	}
	got := func(key string) bool {
		out, err := client.GetItem(t.Context(), &ddb.GetItemInput{TableName: aws.String(archive), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}}})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Item) > 0
	}
	if !got(byTTL) {
		t.Error("TTL delete not archived")
	}
	if got(byHand) {
		t.Error("an operator's delete archived")
	}
}

// Run reads until its context ends, then returns nil, leaving no goroutine.
func TestAuditRunStopsWithItsContext(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
	r := newAuditRig(t)
	st := newStore(t, r.client, r.table, dynamostore.WithoutClockCheck())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.auditor.Run(ctx) }()
	k := uniqueKey(t)
	r.completed(t, st, k, "o", time.Now())
	r.sweep(t, k)
	testenv.Eventually(t, 20*time.Second, "Run archived the removal", func() bool { return r.tombstone(t, k) })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Through the consumer: a message processed, its record removed as if by
// TTL and archived, then a new message with the same key: answered as a
// duplicate with an empty response, the handler not run again, and
// counted; without the archive the handler runs twice.
func TestAuditLateDuplicateThroughConsumer(t *testing.T) {
	for _, archive := range []bool{true, false} {
		t.Run(map[bool]string{true: "archive", false: "no archive"}[archive], func(t *testing.T) {
			r := newAuditRig(t)
			opts := []dynamostore.Option{dynamostore.WithMeterProvider(r.mp)}
			if archive {
				opts = append(opts, dynamostore.WithArchive(r.archive))
			}
			st := newStore(t, r.client, r.table, opts...)
			var runs atomic.Int32
			g, err := consumer.NewGuard(st, consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
				runs.Add(1)
				return consumer.Result{Response: []byte("done")}, nil
			}), consumer.WithoutCompletedCache())
			if err != nil {
				t.Fatal(err)
			}
			id := uniqueName("order-")
			msg := func() *consumer.Message {
				return &consumer.Message{Body: []byte(`{}`), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: id}}
			}
			if o := g.Process(t.Context(), msg()); o.Kind != consumer.Processed {
				t.Fatalf("first: %v %v", o.Kind, o.Err)
			}
			key, _ := dedup.Key("onceq", id)
			r.sweep(t, key)
			r.until(t, "the tombstone", func() bool { return r.tombstone(t, key) })
			o := g.Process(t.Context(), msg())
			want, wantRuns, wantCount := consumer.Duplicate, int32(1), int64(1)
			if !archive {
				want, wantRuns, wantCount = consumer.Processed, 2, 0
			}
			if o.Kind != want || runs.Load() != wantRuns {
				t.Fatalf("late copy: %v (response %q), %d handler runs; want %v and %d", o.Kind, o.Response, runs.Load(), want, wantRuns)
			}
			if archive && (len(o.Response) != 0 || !o.Archived) {
				t.Errorf("late duplicate: response %q, Archived %v; want empty and true", o.Response, o.Archived)
			}
			if n := r.counter(t, "onceq.dynamodb.ttl_delete_before_retry"); n != wantCount {
				t.Errorf("ttl_delete_before_retry %d, want %d", n, wantCount)
			}
		})
	}
}

// Without FromStreamStart the trail starts at the stream's end: a removal
// before the first read is not archived, one after it is (and since a
// shard is read in order, archiving the later one proves the earlier was
// passed over, not pending).
func TestAuditStartsAtTheStreamsEnd(t *testing.T) {
	r := newAuditRig(t)
	ep := testenv.DynamoDBEndpoint(t)
	streams := dynamodbstreams.NewFromConfig(awstest.Config(t, ep), func(o *dynamodbstreams.Options) { o.BaseEndpoint = aws.String(ep) })
	a, err := audit.New(r.client, streams, r.table, r.archive, audit.AnyDeleteIsTTL())
	if err != nil {
		t.Fatal(err)
	}
	st := newStore(t, r.client, r.table, dynamostore.WithoutClockCheck())
	now := time.Now()
	before, after := uniqueKey(t), uniqueKey(t)
	r.completed(t, st, before, "o", now)
	r.sweep(t, before)
	if err := a.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	r.completed(t, st, after, "o", now)
	r.sweep(t, after)
	testenv.Eventually(t, 20*time.Second, "the later removal archived", func() bool {
		if err := a.Poll(t.Context()); err != nil {
			t.Fatal(err)
		}
		return r.tombstone(t, after)
	})
	if r.tombstone(t, before) {
		t.Error("a removal from before the trail started was archived")
	}
}

// ClaimComplete (one round trip) reads the archive before it writes: a
// tombstone answers it as a duplicate and nothing is written.
func TestArchiveClaimComplete(t *testing.T) {
	r := newAuditRig(t)
	st := newStore(t, r.client, r.table, dynamostore.WithArchive(r.archive), dynamostore.WithMeterProvider(r.mp), dynamostore.WithoutClockCheck())
	now := time.Now().Truncate(time.Second)
	k := uniqueKey(t)
	r.completed(t, st, k, "first", now)
	r.sweep(t, k)
	r.until(t, "the tombstone", func() bool { return r.tombstone(t, k) })
	later := now.Add(2 * time.Hour)
	c, err := st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h", Owner: "late", Response: []byte("again"), Now: later, ExpiresAt: later.Add(time.Hour)})
	if err != nil || c.Acquired || !c.Archived || c.Existing.Owner != "first" {
		t.Fatalf("one round trip over a tombstone: %+v %v; want a duplicate of the first owner's completion", c, err)
	}
	if _, err := st.Get(t.Context(), k); !errors.Is(err, dedup.ErrNotFound) {
		t.Errorf("record after the archived duplicate: %v, want none written", err)
	}
	if n := r.counter(t, "onceq.dynamodb.ttl_delete_before_retry"); n != 1 {
		t.Errorf("ttl_delete_before_retry %d, want 1", n)
	}
}
