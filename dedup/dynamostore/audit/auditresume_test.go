package audit_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/dynamostore/audit"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/metrictest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// streamSeam sits in a DynamoDB Streams client, at the SDK's first step:
// it counts DescribeStream calls, expires every iterator handed out so
// far on expireAll (a real iterator expires 15 minutes after it was
// issued: GetRecords with it fails with ExpiredIteratorException, a fresh
// one works), and can add shards to a DescribeStream's answer. Each
// iterator it hands out carries the generation it was issued in (DynamoDB
// Local may issue the same iterator twice).
type streamSeam struct {
	mu        sync.Mutex
	describes int
	gen       int            // generation of the iterators issued now
	extra     []stypes.Shard // added to the next listing only
}

func (s *streamSeam) expireAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
}

func (s *streamSeam) describeCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.describes
}

func (s *streamSeam) middleware(st *middleware.Stack) error {
	return st.Initialize.Add(middleware.InitializeMiddlewareFunc("onceqStreamSeam",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			s.mu.Lock()
			gen := s.gen
			switch p := in.Parameters.(type) {
			case *dynamodbstreams.GetRecordsInput:
				g, it, _ := strings.Cut(aws.ToString(p.ShardIterator), "~")
				if g != strconv.Itoa(gen) {
					s.mu.Unlock()
					return middleware.InitializeOutput{}, middleware.Metadata{}, &stypes.ExpiredIteratorException{Message: aws.String("Iterator expired")}
				}
				in.Parameters = &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String(it), Limit: p.Limit}
			case *dynamodbstreams.DescribeStreamInput:
				s.describes++
			}
			s.mu.Unlock()
			out, md, err := next.HandleInitialize(ctx, in)
			s.mu.Lock()
			defer s.mu.Unlock()
			mark := func(it *string) *string {
				if it == nil {
					return nil
				}
				return aws.String(strconv.Itoa(gen) + "~" + *it)
			}
			switch o := out.Result.(type) {
			case *dynamodbstreams.GetShardIteratorOutput:
				o.ShardIterator = mark(o.ShardIterator)
			case *dynamodbstreams.GetRecordsOutput:
				o.NextShardIterator = mark(o.NextShardIterator)
			case *dynamodbstreams.DescribeStreamOutput:
				o.StreamDescription.Shards = append(o.StreamDescription.Shards, s.extra...)
				s.extra = nil
			}
			return out, md, err
		}), middleware.Before)
}

// streamsClient is a DynamoDB Streams client of DynamoDB Local through seam.
func streamsClient(t *testing.T, seam *streamSeam) *dynamodbstreams.Client {
	ep := testenv.DynamoDBEndpoint(t)
	return dynamodbstreams.NewFromConfig(awstest.Config(t, ep), func(o *dynamodbstreams.Options) {
		o.BaseEndpoint = aws.String(ep)
		if seam != nil {
			o.APIOptions = append(o.APIOptions, seam.middleware)
		}
	})
}

// newAuditor is an Auditor of r's tables reading from the stream's end (not
// FromStreamStart), as `onceq audit` does by default.
func (r *auditRig) newAuditor(t *testing.T, streams *dynamodbstreams.Client, opts ...audit.Option) *audit.Auditor {
	t.Helper()
	a, err := audit.New(r.client, streams, r.table, r.archive,
		append([]audit.Option{audit.AnyDeleteIsTTL(), audit.WithLogger(r.logs.Logger(slog.LevelInfo))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func poll(t *testing.T, a *audit.Auditor) {
	t.Helper()
	if err := a.Poll(t.Context()); err != nil {
		t.Fatalf("poll: %v", err)
	}
}

func pollUntil(t *testing.T, a *audit.Auditor, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, what, func() bool {
		poll(t, a)
		return cond()
	})
}

// The iterator of a shard that has yielded no record expires like any
// other: the auditor takes a fresh one and reads on, where every poll
// used to fail. Once the shard has yielded records, an expiry resumes
// after the last one.
func TestAuditReplacesExpiredIteratorOfQuietShard(t *testing.T) {
	r := newAuditRig(t)
	seam := &streamSeam{}
	a := r.newAuditor(t, streamsClient(t, seam))
	st := newStore(t, r.client, r.table)
	poll(t, a) // the shard is opened at the stream's end, and is quiet
	seam.expireAll()
	if err := a.Poll(t.Context()); err != nil {
		t.Fatalf("poll after a quiet shard's iterator expired: %v", err)
	}
	now := time.Now()
	k1 := uniqueKey(t)
	r.completed(t, st, k1, "o", now)
	r.sweep(t, k1)
	pollUntil(t, a, "the removal after the expiry archived", func() bool { return r.tombstone(t, k1) })

	seam.expireAll()
	k2 := uniqueKey(t)
	r.completed(t, st, k2, "o", now)
	r.sweep(t, k2)
	pollUntil(t, a, "the removal after a second expiry archived", func() bool { return r.tombstone(t, k2) })
}

// A restarted auditor resumes where the last one stopped (its checkpoint
// is kept in the archive table): a removal made while no auditor ran is
// archived, and what the first auditor applied is not applied again.
func TestAuditResumesAfterRestart(t *testing.T) {
	r := newAuditRig(t)
	st := newStore(t, r.client, r.table)
	first := r.newAuditor(t, streamsClient(t, nil))
	poll(t, first)
	now := time.Now()
	before := uniqueKey(t)
	r.completed(t, st, before, "o", now)
	r.sweep(t, before)
	pollUntil(t, first, "the first auditor archived its removal", func() bool { return r.tombstone(t, before) })

	// The first auditor is stopped; a key is removed meanwhile.
	down := uniqueKey(t)
	r.completed(t, st, down, "o", now)
	r.sweep(t, down)

	reader, mp := metrictest.Provider(t)
	second := r.newAuditor(t, streamsClient(t, nil), audit.WithMeterProvider(mp))
	pollUntil(t, second, "the removal made while no auditor ran archived", func() bool { return r.tombstone(t, down) })
	if n := metrictest.Counter(t, reader, "onceq.dynamodb.tombstones"); n != 1 {
		t.Errorf("the restarted auditor wrote %d tombstones, want 1 (the first auditor's removal applied again?)", n)
	}
	if !strings.Contains(r.logs.String(), "resuming from the checkpoint") {
		t.Errorf("no log line of the resumption: %s", r.logs.String())
	}
}

// An auditor checks its archive table when it starts: a missing one, or
// one whose key schema is not the records table's, is an
// *ArchiveTableError naming it (it used to poll along and fail at the
// first removal, or write tombstones no claim finds).
func TestAuditChecksArchiveTable(t *testing.T) {
	r := newAuditRig(t)
	tenant := recordsTable(t, r.client, dynamostore.TenantLayout())
	for name, archive := range map[string]string{"missing": uniqueName("onceq_missing_"), "other key schema": tenant} {
		t.Run(name, func(t *testing.T) {
			a, err := audit.New(r.client, streamsClient(t, nil), r.table, archive)
			if err != nil {
				t.Fatal(err)
			}
			err = a.Poll(t.Context())
			var ate *audit.ArchiveTableError
			if !errors.Is(err, audit.ErrArchiveTable) || !errors.As(err, &ate) || ate.Table != archive || !strings.Contains(err.Error(), archive) {
				t.Fatalf("poll with archive %s (%s): %v, want an ArchiveTableError naming it", archive, name, err)
			}
			var missing *types.ResourceNotFoundException
			if errors.As(err, &missing) != (name == "missing") {
				t.Errorf("%s: %v: ResourceNotFoundException wrapped: %v", name, err, !(name == "missing"))
			}
		})
	}
}

// The stream's shards are listed once, then when a shard closes or a
// minute has passed; not on every poll (DescribeStream is limited to 10
// calls a second per account).
func TestAuditListsShardsOnlyWhenNeeded(t *testing.T) {
	r := newAuditRig(t)
	seam := &streamSeam{}
	a := r.newAuditor(t, streamsClient(t, seam))
	for range 5 {
		poll(t, a)
	}
	if n := seam.describeCalls(); n != 1 {
		t.Fatalf("5 polls listed the shards %d times, want 1", n)
	}
}

// A finished shard is remembered only while the stream lists it: once
// trimmed it is forgotten, so the auditor's memory stays the stream's size.
func TestAuditForgetsTrimmedShards(t *testing.T) {
	r := newAuditRig(t)
	seam := &streamSeam{extra: []stypes.Shard{{
		ShardId:             aws.String("shardId-00000000000000000000-trimmed0"),
		SequenceNumberRange: &stypes.SequenceNumberRange{StartingSequenceNumber: aws.String("1"), EndingSequenceNumber: aws.String("2")},
	}}}
	a := r.newAuditor(t, streamsClient(t, seam))
	poll(t, a) // the closed shard is passed over (read from now): finished
	if n := a.FinishedShards(); n != 1 {
		t.Fatalf("finished shards after the first listing: %d, want the closed one", n)
	}
	a.ListShardsNow()
	poll(t, a) // the closed shard is no longer listed
	if n := a.FinishedShards(); n != 0 {
		t.Fatalf("finished shards once the closed one is trimmed: %d, want 0", n)
	}
}

// DynamoDB Local 3.x runs TTL, and its sweeper's stream records carry no
// userIdentity and an event name the SDK does not know
// (UNKNOWN_TO_SDK_VERSION): with AnyDeleteIsTTL they are TTL removals and
// archived, where they used to be ignored and a late retry ran again.
func TestAuditDynamoDBLocalTTLRemoval(t *testing.T) {
	r := newAuditRig(t)
	s := func(v string) stypes.AttributeValue { return &stypes.AttributeValueMemberS{Value: v} }
	n := func(v string) stypes.AttributeValue { return &stypes.AttributeValueMemberN{Value: v} }
	at := time.Unix(1700003700, 0)
	key := uniqueKey(t)
	rec := stypes.Record{EventName: "UNKNOWN_TO_SDK_VERSION", AwsRegion: aws.String("ddblocal"), Dynamodb: &stypes.StreamRecord{
		ApproximateCreationDateTime: &at,
		Keys:                        map[string]stypes.AttributeValue{"pk": s(key)},
		OldImage: map[string]stypes.AttributeValue{
			"pk": s(key), "status": s("COMPLETED"), "version": n("2"), "owner": s("o"),
			"payload_hash": s("h"), "attempts": n("1"), "created_at": n("1700000000"), "expires_at": n("1700000100"),
		},
	}}
	strict, err := audit.New(r.client, nil, r.table, r.archive)
	if err != nil {
		t.Fatal(err)
	}
	if err := strict.ApplyStreamRecords(t.Context(), []stypes.Record{rec}); err != nil {
		t.Fatal(err)
	}
	if r.tombstone(t, key) {
		t.Fatal("a removal without the TTL service's identity archived without AnyDeleteIsTTL")
	}
	if err := r.newAuditor(t, nil).ApplyStreamRecords(t.Context(), []stypes.Record{rec}); err != nil {
		t.Fatal(err)
	}
	if !r.tombstone(t, key) {
		t.Fatal("DynamoDB Local's TTL removal not archived with AnyDeleteIsTTL")
	}
	out, err := r.client.GetItem(t.Context(), &ddb.GetItemInput{TableName: aws.String(r.archive), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}}})
	if err != nil || out.Item["owner"] == nil {
		t.Fatalf("tombstone %v, %v: want the removed record's owner", out.Item, err)
	}
}

// DynamoDB Local numbers stream records across all its tables: once
// another table is written, the position a quiet shard's iterator holds
// lies before the shard's first record, and GetRecords says it was
// trimmed (DynamoDB says so of records older than 24 hours). The auditor
// reads on from the oldest record the shard holds, where every poll used
// to fail.
func TestAuditReadsOnAfterTrimmedPosition(t *testing.T) {
	r := newAuditRig(t)
	a := r.newAuditor(t, streamsClient(t, nil))
	st := newStore(t, r.client, r.table)
	poll(t, a) // the shard is opened at its end, and is quiet
	other := recordsTable(t, r.client)
	for i := range 3 {
		if _, err := r.client.PutItem(t.Context(), &ddb.PutItemInput{TableName: aws.String(other),
			Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: strconv.Itoa(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	k := uniqueKey(t)
	r.completed(t, st, k, "o", time.Now())
	r.sweep(t, k)
	pollUntil(t, a, "the removal archived", func() bool { return r.tombstone(t, k) })
}
