package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/dynamostore/internal/items"
	"github.com/onceq/onceq/retry"
)

// instrumentationName is the store's: the Auditor's metrics
// (onceq.dynamodb.*) are the DynamoDB store's, under its scope.
const instrumentationName = "github.com/onceq/onceq/dedup/dynamostore"

// The identity of DynamoDB's TTL sweeper on a stream record: a delete by
// anyone else (an operator, a worker) carries none.
const (
	ttlIdentityType      = "Service"
	ttlIdentityPrincipal = "dynamodb.amazonaws.com"
)

// ErrNoStream: the records table has no stream to audit.
var ErrNoStream = errors.New("dynamostore: the records table has no stream (create it with dynamostore.WithStream)")

// Auditor reads a records table's DynamoDB stream (StreamViewType
// NEW_AND_OLD_IMAGES, see dynamostore.WithStream) and keeps the audit trail:
//   - a tombstone in the archive table for each COMPLETED record TTL
//     removed (or that a claim took over once expired), kept for the
//     archive's own retention: what WithArchive consults;
//   - the TTL lag of every TTL delete (its time minus expires_at), as the
//     histogram onceq.dynamodb.ttl_lag;
//   - doubled completions: a key completed by two owners, a COMPLETED
//     record overwritten by another owner's, or completed again while a
//     tombstone of another owner's completion is archived. Counted as
//     onceq.dynamodb.doubled_completions and logged (WARN, key hash).
//
// Run reads the stream beside a worker, keeping its position in the
// archive table so that a restart resumes where it stopped (see Poll);
// ApplyStreamRecords does the same work for a Lambda function subscribed
// to the stream, whose position Lambda keeps. An Auditor is safe for
// concurrent use, but one stream wants one reader.
type Auditor struct {
	db        *ddb.Client
	streams   *dynamodbstreams.Client
	table     string
	archive   *string
	retention time.Duration
	anyDelete bool
	fromStart bool
	poll      time.Duration
	policy    retry.Policy
	log       *slog.Logger

	lag     metric.Float64Histogram
	stones  metric.Int64Counter
	doubled metric.Int64Counter

	mu     sync.Mutex
	shards map[string]*shardPos // the stream's shards being read
	done   map[string]bool      // shards read to their end
	arn    string
	// discovered: the stream's shards were listed once.
	discovered bool
	// tenantArchive: the tables have the tenant layout's key schema.
	tenantArchive bool
	// listedAt: when the shards were last listed; relist: a shard closed
	// since, so its children are to be found.
	listedAt time.Time
	relist   bool
}

// shardPos is where the reading of a shard stands.
type shardPos struct {
	iter, last string // next iterator; last sequence number processed
}

// Option configures New: ArchiveRetention, AnyDeleteIsTTL,
// FromStreamStart, PollInterval, WithLogger, WithMeterProvider and
// WithRetryPolicy. An Auditor beside a worker is given the logger, meter
// provider and retry policy of the worker's store.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	retention time.Duration
	anyDelete bool
	fromStart bool
	poll      time.Duration
	policy    retry.Policy
	log       *slog.Logger
	meter     metric.MeterProvider
}

// WithLogger sets the logger of the Auditor's warnings (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.log = l })
}

// WithMeterProvider sets where the Auditor's metrics go (default the
// global MeterProvider): onceq.dynamodb.ttl_lag, .tombstones and
// .doubled_completions.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meter = mp })
}

// WithRetryPolicy sets the backoff used for throttles and transient faults
// of the DynamoDB and DynamoDB Streams calls (default
// retry.DefaultPolicy()).
func WithRetryPolicy(p retry.Policy) Option {
	return optionFunc(func(c *config) { c.policy = p })
}

// ArchiveRetention is how long a tombstone is kept (default 30 days): the
// window in which a late duplicate is still recognised. It should exceed
// the longest time a producer may send a key again.
func ArchiveRetention(d time.Duration) Option {
	return optionFunc(func(c *config) { c.retention = d })
}

// AnyDeleteIsTTL treats every delete as TTL's, where by default only a
// delete by DynamoDB's TTL sweeper (userIdentity type Service, principal
// dynamodb.amazonaws.com) counts: for DynamoDB Local, whose TTL sweeper
// runs but marks its deletes with no userIdentity (and an event name of
// its own, read as a removal), and for tests that delete by hand.
func AnyDeleteIsTTL() Option {
	return optionFunc(func(c *config) { c.anyDelete = true })
}

// FromStreamStart makes Run read each shard from its oldest record
// (TRIM_HORIZON, up to 24 hours back) instead of from now (LATEST), when
// no reader has left a checkpoint of this stream in the archive table
// (with one, Run resumes from it either way). The trail's writes are
// idempotent, so records read twice only count twice.
func FromStreamStart() Option {
	return optionFunc(func(c *config) { c.fromStart = true })
}

// PollInterval is how long Run waits after a round that found the stream
// read to its end (default 1 s).
func PollInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.poll = d })
}

// New returns an Auditor of table's stream writing tombstones into
// archive (which dynamostore.CreateTable can make, with the records
// table's layout).
// streams may be nil for an Auditor used only by ApplyStreamRecords.
func New(db *ddb.Client, streams *dynamodbstreams.Client, table, archive string, opts ...Option) (*Auditor, error) {
	cfg := config{retention: 30 * 24 * time.Hour, poll: time.Second, policy: retry.DefaultPolicy()}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	switch {
	case db == nil:
		return nil, fmt.Errorf("dynamostore: %w: auditor without a DynamoDB client", dynamostore.ErrInvalidConfig)
	case table == "" || archive == "":
		return nil, fmt.Errorf("dynamostore: %w: auditor needs the records table and the archive table", dynamostore.ErrInvalidConfig)
	case table == archive:
		return nil, fmt.Errorf("dynamostore: %w: the archive table must not be the records table %s", dynamostore.ErrInvalidConfig, table)
	case cfg.retention <= 0 || cfg.poll <= 0:
		return nil, fmt.Errorf("dynamostore: %w: archive retention and poll interval must be positive", dynamostore.ErrInvalidConfig)
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	if cfg.meter == nil {
		cfg.meter = otel.GetMeterProvider()
	}
	m := cfg.meter.Meter(instrumentationName)
	a := &Auditor{
		db: db, streams: streams, table: table, archive: aws.String(archive),
		retention: cfg.retention, anyDelete: cfg.anyDelete, fromStart: cfg.fromStart, poll: cfg.poll,
		policy: cfg.policy, log: cfg.log,
		shards: map[string]*shardPos{}, done: map[string]bool{},
	}
	var err error
	if a.lag, err = m.Float64Histogram("onceq.dynamodb.ttl_lag", metric.WithUnit("s"),
		metric.WithDescription("Time from a record's expires_at to its TTL delete, from the table's stream (DynamoDB allows up to 48 h)."),
		metric.WithExplicitBucketBoundaries(1, 10, 60, 600, 3600, 6*3600, 24*3600, 48*3600, 96*3600)); err != nil {
		return nil, fmt.Errorf("dynamostore: %w: metrics: %w", dynamostore.ErrInvalidConfig, err)
	}
	if a.stones, err = m.Int64Counter("onceq.dynamodb.tombstones",
		metric.WithDescription("COMPLETED records removed by TTL (or taken over once expired) and archived as tombstones.")); err != nil {
		return nil, fmt.Errorf("dynamostore: %w: metrics: %w", dynamostore.ErrInvalidConfig, err)
	}
	if a.doubled, err = m.Int64Counter("onceq.dynamodb.doubled_completions",
		metric.WithDescription("Keys completed by two different owners, seen on the stream (under Global Tables, once in each of two regions): their business effect may have happened twice.")); err != nil {
		return nil, fmt.Errorf("dynamostore: %w: metrics: %w", dynamostore.ErrInvalidConfig, err)
	}
	return a, nil
}

// change is one stream record, from either stream API.
type change struct {
	event      string // INSERT, MODIFY, REMOVE
	region     string // where the stream record was written
	at         time.Time
	ttl        bool // deleted by the TTL sweeper
	keys       map[string]types.AttributeValue
	old, image map[string]types.AttributeValue
}

// Run reads the stream until ctx is done (then it returns nil) or an error
// it cannot retry. Run it in a goroutine the caller owns, beside a worker.
func (a *Auditor) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		if err := a.Poll(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		timer.Reset(a.poll)
	}
}

// Poll reads every shard of the stream up to its present end once, and
// applies what it read. Run calls it in a loop.
//
// The first Poll checks the tables (the records table has a stream; the
// archive exists with the records table's key schema, else an
// *ArchiveTableError) and reads the checkpoint the last reader of the
// stream left in the archive table: each shard is read on from the last
// record applied, a shard that opened meanwhile from its start. Only a
// stream no reader has checkpointed is read from its end (or from its
// start, FromStreamStart). After each page of records a shard's position
// is saved, so a restart reapplies at most one page per shard (harmless:
// the trail's writes are idempotent; such records are counted twice).
// The stream's shards are listed when a shard closes, and once a minute.
func (a *Auditor) Poll(ctx context.Context) error {
	if a.streams == nil {
		return fmt.Errorf("dynamostore: %w: auditor of %s has no streams client", dynamostore.ErrInvalidConfig, a.table)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.arn == "" {
		if err := a.checkTables(ctx); err != nil {
			return err
		}
	}
	if !a.discovered || a.relist || len(a.shards) == 0 || time.Since(a.listedAt) >= describeEvery {
		if err := a.discover(ctx); err != nil {
			return err
		}
	}
	ids := make([]string, 0, len(a.shards))
	for id := range a.shards {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := a.readShard(ctx, id, a.shards[id]); err != nil {
			return err
		}
	}
	return nil
}

// discover adds the stream's shards not yet read.
func (a *Auditor) discover(ctx context.Context) error {
	var shards []stypes.Shard
	var start *string
	for {
		var out *dynamodbstreams.DescribeStreamOutput
		err := a.policy.Do(ctx, func(ctx context.Context) error {
			var err error
			out, err = a.streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(a.arn), ExclusiveStartShardId: start})
			return err
		}, nil)
		if err != nil {
			return fmt.Errorf("dynamostore: stream of table %s: %w", a.table, err)
		}
		shards = append(shards, out.StreamDescription.Shards...)
		if start = out.StreamDescription.LastEvaluatedShardId; start == nil {
			break
		}
	}
	a.listedAt, a.relist = time.Now(), false
	known := make(map[string]bool, len(shards))
	for _, s := range shards {
		known[aws.ToString(s.ShardId)] = true
	}
	// A shard no longer listed was trimmed (24 hours after it closed): no
	// child waits for it any more, so it is forgotten and the map stays
	// as small as the stream.
	for id := range a.done {
		if !known[id] {
			delete(a.done, id)
		}
	}
	first := !a.discovered
	var saved map[string]checkpoint
	resumed := false
	if first {
		var err error
		if saved, resumed, err = a.loadCheckpoints(ctx, shards); err != nil {
			return err
		}
		if resumed {
			a.log.InfoContext(ctx, "dynamostore: audit: resuming from the checkpoint in the archive table", "table", a.table, "archive", *a.archive)
		}
	}
	// From now (a stream never checkpointed, not FromStreamStart): the
	// first round skips closed shards and reads open ones from their end;
	// shards that open later, or whose position is not saved when
	// resuming, are read from their start.
	fromNow := first && !resumed && !a.fromStart
	var skipped []string
	for _, s := range shards {
		id, parent := aws.ToString(s.ShardId), aws.ToString(s.ParentShardId)
		if a.done[id] || a.shards[id] != nil {
			continue
		}
		if cp, ok := saved[id]; ok && cp.done {
			a.done[id] = true
			continue
		} else if ok && cp.seq != "" {
			pos, err := a.resume(ctx, id, cp.seq)
			if err != nil {
				return err
			}
			a.shards[id] = pos
			continue
		}
		it := stypes.ShardIteratorTypeTrimHorizon
		if fromNow {
			if r := s.SequenceNumberRange; r != nil && r.EndingSequenceNumber != nil {
				a.done[id] = true
				skipped = append(skipped, id)
				continue
			}
			it = stypes.ShardIteratorTypeLatest
		} else if parent != "" && known[parent] && !a.done[parent] {
			continue // a child waits for its parent, so a key's records come in order
		}
		iter, err := a.iterator(ctx, id, it, nil)
		if err != nil {
			return err
		}
		a.shards[id] = &shardPos{iter: iter}
	}
	if first && !resumed {
		// Closed shards passed over stay passed over after a restart.
		for _, id := range skipped {
			if err := a.saveCheckpoint(ctx, id, checkpoint{done: true}); err != nil {
				return err
			}
		}
		if err := a.saveCheckpoint(ctx, "", checkpoint{}); err != nil {
			return err
		}
	}
	// Only now: a first listing cut short is done again, checkpoint too.
	a.discovered = true
	return nil
}

// warnTrimmed says that the stream lost shard's records past the last one
// read, whose removals the archive may then lack.
func (a *Auditor) warnTrimmed(ctx context.Context, shard string) {
	a.log.WarnContext(ctx, "dynamostore: audit: the stream no longer holds the records after the last one read: removals made meanwhile may be missing from the archive",
		"table", a.table, "shard", shard)
}

// resume opens shard after seq, the last record applied (before a
// restart, or before an iterator expired); from the shard's start when
// there is none, or when that record was trimmed meanwhile (the reader
// was down longer than the stream keeps records), then with a warning.
func (a *Auditor) resume(ctx context.Context, shard, seq string) (*shardPos, error) {
	if seq == "" {
		iter, err := a.iterator(ctx, shard, stypes.ShardIteratorTypeTrimHorizon, nil)
		return &shardPos{iter: iter}, err
	}
	iter, err := a.iterator(ctx, shard, stypes.ShardIteratorTypeAfterSequenceNumber, aws.String(seq))
	var trimmed *stypes.TrimmedDataAccessException
	if errors.As(err, &trimmed) {
		a.warnTrimmed(ctx, shard)
		iter, err = a.iterator(ctx, shard, stypes.ShardIteratorTypeTrimHorizon, nil)
		seq = ""
	}
	if err != nil {
		return nil, err
	}
	return &shardPos{iter: iter, last: seq}, nil
}

func (a *Auditor) iterator(ctx context.Context, shard string, it stypes.ShardIteratorType, after *string) (string, error) {
	var out *dynamodbstreams.GetShardIteratorOutput
	var trimmed error
	err := a.policy.Do(ctx, func(ctx context.Context) error {
		var err error
		out, err = a.streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
			StreamArn: aws.String(a.arn), ShardId: aws.String(shard), ShardIteratorType: it, SequenceNumber: after,
		})
		if errors.As(err, new(*stypes.TrimmedDataAccessException)) {
			trimmed, err = err, nil // final: the caller decides
		}
		return err
	}, nil)
	if err == nil && trimmed != nil {
		err = trimmed
	}
	if err != nil {
		return "", fmt.Errorf("dynamostore: stream of table %s, shard iterator: %w", a.table, err)
	}
	return aws.ToString(out.ShardIterator), nil
}

// maxPages bounds one shard's pages per round, so one busy shard does not
// starve the others.
const maxPages = 64

func (a *Auditor) readShard(ctx context.Context, id string, pos *shardPos) error {
	for range maxPages {
		var out *dynamodbstreams.GetRecordsOutput
		var expired, trimmed bool
		err := a.policy.Do(ctx, func(ctx context.Context) error {
			var err error
			out, err = a.streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String(pos.iter)})
			// Final for this iterator, which would fail again.
			expired = errors.As(err, new(*stypes.ExpiredIteratorException))
			trimmed = errors.As(err, new(*stypes.TrimmedDataAccessException))
			if expired || trimmed {
				err = nil
			}
			return err
		}, nil)
		switch {
		case err != nil:
			return fmt.Errorf("dynamostore: stream of table %s, shard records: %w", a.table, err)
		case expired:
			// An iterator lives 15 minutes, a quiet shard's too: start
			// again after the last record applied or, before any, from
			// the shard's start (what was read is read again, harmlessly,
			// rather than what came meanwhile being missed).
			np, err := a.resume(ctx, id, pos.last)
			if err != nil {
				return err
			}
			*pos = *np
			continue
		case trimmed:
			// The iterator points at records the stream no longer holds
			// (older than 24 hours; DynamoDB Local also says so of a
			// position before a shard's first record): read from the
			// oldest one it holds.
			if pos.last != "" {
				a.warnTrimmed(ctx, id)
			}
			if pos.iter, err = a.iterator(ctx, id, stypes.ShardIteratorTypeTrimHorizon, nil); err != nil {
				return err
			}
			continue
		}
		for _, r := range out.Records {
			if err := a.apply(ctx, fromStream(r)); err != nil {
				return err
			}
			if r.Dynamodb != nil && r.Dynamodb.SequenceNumber != nil {
				pos.last = *r.Dynamodb.SequenceNumber
			}
		}
		if out.NextShardIterator == nil {
			if err := a.saveCheckpoint(ctx, id, checkpoint{seq: pos.last, done: true}); err != nil {
				return err
			}
			a.done[id] = true // closed and read: its children may start
			a.relist = true
			delete(a.shards, id)
			return nil
		}
		if len(out.Records) > 0 && pos.last != "" {
			if err := a.saveCheckpoint(ctx, id, checkpoint{seq: pos.last}); err != nil {
				return err
			}
		}
		pos.iter = *out.NextShardIterator
		if len(out.Records) == 0 {
			return nil
		}
	}
	return nil
}

// ApplyStreamRecords applies stream records the caller read itself: a
// Lambda function on the table's stream (package auditlambda converts
// its event to these records), or a reader of its own. An error fails the
// batch; applied again, a record is harmless but counted twice.
func (a *Auditor) ApplyStreamRecords(ctx context.Context, records []stypes.Record) error {
	for _, r := range records {
		if err := a.apply(ctx, fromStream(r)); err != nil {
			return err
		}
	}
	return nil
}

// apply keeps the trail for one change.
func (a *Auditor) apply(ctx context.Context, c change) error {
	switch c.event {
	case "REMOVE":
		if !c.ttl && !a.anyDelete {
			return nil // an operator's delete: neither lag nor a removal by TTL
		}
		old, err := items.DecodeRecord(c.old)
		if err != nil {
			a.log.WarnContext(ctx, "dynamostore: audit: a deleted record without a readable old image (is the stream's view NEW_AND_OLD_IMAGES?)", "table", a.table, "err", err)
			return nil
		}
		a.lag.Record(ctx, c.at.Sub(old.ExpiresAt).Seconds())
		if old.Status == dedup.StatusCompleted && !items.Archived(c.old) {
			return a.bury(ctx, c, old)
		}
	case "INSERT", "MODIFY":
		rec, err := items.DecodeRecord(c.image)
		if err != nil {
			return nil // not a record of ours
		}
		var old *dedup.Record
		if o, err := items.DecodeRecord(c.old); err == nil && o.Status == dedup.StatusCompleted && !items.Archived(c.old) {
			old = &o
		}
		if rec.Status != dedup.StatusCompleted || items.Archived(c.image) {
			if old != nil && old.Owner != rec.Owner {
				// An expired COMPLETED record taken over by a claim is
				// removed as TTL would have: archive it.
				return a.bury(ctx, c, *old)
			}
			return nil
		}
		if old != nil {
			if old.Owner != rec.Owner {
				a.doubledCompletion(ctx, c, rec, "overwritten")
			}
			return nil
		}
		stone, err := a.tombstoneOf(ctx, c.keys)
		if err != nil {
			return err
		}
		if owner, _ := items.GetS(stone, items.AttrOwner, false); stone != nil && owner != rec.Owner {
			a.doubledCompletion(ctx, c, rec, "completed again within the archive's retention")
		}
	}
	return nil
}

func (a *Auditor) doubledCompletion(ctx context.Context, c change, rec dedup.Record, how string) {
	a.doubled.Add(ctx, 1)
	a.log.WarnContext(ctx, "dynamostore: a key was completed by two owners: its effect may have run twice",
		"table", a.table, "key_hash", dedup.KeyHash(rec.Key), "how", how, "region", c.region)
}

// bury writes old's tombstone: the key, owner, version and payload hash,
// removed_at, and expires_at for the archive's TTL.
func (a *Auditor) bury(ctx context.Context, c change, old dedup.Record) error {
	item := make(map[string]types.AttributeValue, len(c.keys)+6)
	for k, v := range c.keys {
		item[k] = v
	}
	item[items.AttrOwner] = items.Str(old.Owner)
	item[items.AttrVersion] = items.Num(old.Version)
	item[items.AttrPayload] = items.Str(old.PayloadHash)
	item[items.AttrRemovedAt] = items.Num(items.FloorUnix(c.at))
	item[items.AttrExpires] = items.Num(items.CeilUnix(c.at.Add(a.retention)))
	err := a.policy.Do(ctx, func(ctx context.Context) error {
		_, err := a.db.PutItem(ctx, &ddb.PutItemInput{TableName: a.archive, Item: item})
		return err
	}, nil)
	if err != nil {
		return fmt.Errorf("dynamostore: archive table %s: %w", aws.ToString(a.archive), err)
	}
	a.stones.Add(ctx, 1)
	return nil
}

func (a *Auditor) tombstoneOf(ctx context.Context, keys map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	var out *ddb.GetItemOutput
	err := a.policy.Do(ctx, func(ctx context.Context) error {
		var err error
		out, err = a.db.GetItem(ctx, &ddb.GetItemInput{TableName: a.archive, Key: keys, ConsistentRead: aws.Bool(true)})
		return err
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: archive table %s: %w", aws.ToString(a.archive), err)
	}
	return out.Item, nil
}

func fromStream(r stypes.Record) change {
	c := change{event: string(r.EventName), region: aws.ToString(r.AwsRegion)}
	if id := r.UserIdentity; id != nil {
		c.ttl = aws.ToString(id.Type) == ttlIdentityType && aws.ToString(id.PrincipalId) == ttlIdentityPrincipal
	}
	if d := r.Dynamodb; d != nil {
		c.at = aws.ToTime(d.ApproximateCreationDateTime)
		c.keys, c.old, c.image = streamImage(d.Keys), streamImage(d.OldImage), streamImage(d.NewImage)
	}
	switch r.EventName {
	case stypes.OperationTypeInsert, stypes.OperationTypeModify, stypes.OperationTypeRemove:
	default:
		// DynamoDB Local 3.x names its TTL sweeper's deletes with a name
		// the SDK does not know (and no userIdentity): a record with an
		// old image and no new one is a removal, whatever it is called.
		if c.old != nil && c.image == nil {
			c.event = string(stypes.OperationTypeRemove)
		}
	}
	return c
}

// streamImage converts a stream image to DynamoDB's attribute values
// (the two services' SDK packages have types of their own).
func streamImage(m map[string]stypes.AttributeValue) map[string]types.AttributeValue {
	if m == nil {
		return nil
	}
	out := make(map[string]types.AttributeValue, len(m))
	for k, v := range m {
		if av := streamValue(v); av != nil {
			out[k] = av
		}
	}
	return out
}

func streamValue(v stypes.AttributeValue) types.AttributeValue {
	switch v := v.(type) {
	case *stypes.AttributeValueMemberS:
		return &types.AttributeValueMemberS{Value: v.Value}
	case *stypes.AttributeValueMemberN:
		return &types.AttributeValueMemberN{Value: v.Value}
	case *stypes.AttributeValueMemberB:
		return &types.AttributeValueMemberB{Value: v.Value}
	case *stypes.AttributeValueMemberBOOL:
		return &types.AttributeValueMemberBOOL{Value: v.Value}
	case *stypes.AttributeValueMemberNULL:
		return &types.AttributeValueMemberNULL{Value: v.Value}
	case *stypes.AttributeValueMemberSS:
		return &types.AttributeValueMemberSS{Value: v.Value}
	case *stypes.AttributeValueMemberNS:
		return &types.AttributeValueMemberNS{Value: v.Value}
	case *stypes.AttributeValueMemberBS:
		return &types.AttributeValueMemberBS{Value: v.Value}
	case *stypes.AttributeValueMemberM:
		return &types.AttributeValueMemberM{Value: streamImage(v.Value)}
	case *stypes.AttributeValueMemberL:
		l := make([]types.AttributeValue, 0, len(v.Value))
		for _, e := range v.Value {
			if av := streamValue(e); av != nil {
				l = append(l, av)
			}
		}
		return &types.AttributeValueMemberL{Value: l}
	}
	return nil
}
