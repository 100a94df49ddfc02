package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/dynamostore/internal/items"
	"github.com/onceq/onceq/retry"
)

// ErrArchiveTable: the archive table an Auditor was given is missing or
// its key schema is not the records table's. The error is an
// *ArchiveTableError.
var ErrArchiveTable = errors.New("dynamostore: archive table unusable")

// ArchiveTableError names the archive table an Auditor cannot use: it
// does not exist (Err wraps the ResourceNotFoundException) or its key
// schema differs from the records table's (a tombstone is written under
// the removed record's own key). A configuration fault, found when the
// Auditor starts.
type ArchiveTableError struct {
	Table string // the archive table
	Err   error
}

func (e *ArchiveTableError) Error() string {
	return fmt.Sprintf("dynamostore: archive table %s: %v", e.Table, e.Err)
}

func (e *ArchiveTableError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrArchiveTable) true.
func (e *ArchiveTableError) Is(target error) bool { return target == ErrArchiveTable }

// RetryClass implements retry.Classifier: the table must be fixed first.
func (e *ArchiveTableError) RetryClass() retry.Class { return retry.Misconfigured }

// The checkpoint lives in the archive table: one item per shard (the
// last sequence number applied, or that the shard was read to its end)
// and one per stream (that a reader has started on it). Their keys start
// the key part a record's key lives in with dedup.HashedPrefix and go on
// with text that is not a hash, a stored key no record can have (the
// layout hashes every part that starts so), so a checkpoint is never
// taken for a tombstone or overwritten by one.
const (
	attrCheckpoint = "checkpoint" // "stream" or "shard"
	attrSequence   = "sequence"   // last sequence number applied
	attrShardDone  = "shard_done" // the shard was read to its end
	// checkpointTTL: a shard's records are trimmed 24 hours after they
	// were written, and a shard is listed no longer than that after it
	// closes; a checkpoint untouched for twice that is of no use.
	checkpointTTL = 48 * time.Hour
	// describeEvery: the stream's shards are listed when a shard closes
	// (its children appear then) and at least this often besides, for a
	// child listed late.
	describeEvery = time.Minute
)

// checkpoint is where a previous run left a shard.
type checkpoint struct {
	seq  string
	done bool
}

// checkpointKey is the archive key of shard's checkpoint ("" for the
// stream's own item).
func (a *Auditor) checkpointKey(shard string) map[string]types.AttributeValue {
	label := a.arn[strings.LastIndex(a.arn, "/")+1:]
	part := dedup.HashedPrefix + "audit-checkpoint/" + a.table + "/" + label
	if shard != "" {
		part += "/" + shard
	}
	if a.tenantArchive {
		return map[string]types.AttributeValue{items.AttrPK: items.Str("onceq"), items.AttrSK: items.Str(part)}
	}
	return map[string]types.AttributeValue{items.AttrPK: items.Str("onceq#" + part)}
}

// checkTables reads the records table's stream ARN and key schema, and
// checks that the archive exists with the same key schema.
func (a *Auditor) checkTables(ctx context.Context) error {
	describe := func(table string) (*types.TableDescription, error) {
		var out *ddb.DescribeTableOutput
		err := a.policy.Do(ctx, func(ctx context.Context) error {
			var err error
			out, err = a.db.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: aws.String(table)})
			return err
		}, nil)
		if err != nil {
			return nil, err
		}
		return out.Table, nil
	}
	records, err := describe(a.table)
	if err != nil {
		return fmt.Errorf("dynamostore: table %s: %w", a.table, err)
	}
	if records.LatestStreamArn == nil {
		return fmt.Errorf("%w: table %s", ErrNoStream, a.table)
	}
	tenant := items.CheckSchema(records, true) == nil
	if !tenant {
		if err := items.CheckSchema(records, false); err != nil {
			return fmt.Errorf("dynamostore: table %s: %w", a.table, &dynamostore.LayoutError{Err: err})
		}
	}
	archive, err := describe(*a.archive)
	var missing *types.ResourceNotFoundException
	switch {
	case errors.As(err, &missing):
		return &ArchiveTableError{Table: *a.archive, Err: err}
	case err != nil:
		return fmt.Errorf("dynamostore: archive table %s: %w", *a.archive, err)
	case items.CheckSchema(archive, tenant) != nil:
		return &ArchiveTableError{Table: *a.archive, Err: fmt.Errorf("key schema is not the one of table %s", a.table)}
	}
	a.arn, a.tenantArchive = *records.LatestStreamArn, tenant
	return nil
}

// loadCheckpoints reads the checkpoints of shards, and whether a reader
// has started on this stream before (resumed).
func (a *Auditor) loadCheckpoints(ctx context.Context, shards []stypes.Shard) (saved map[string]checkpoint, resumed bool, err error) {
	keys := []map[string]types.AttributeValue{a.checkpointKey("")}
	for _, s := range shards {
		keys = append(keys, a.checkpointKey(aws.ToString(s.ShardId)))
	}
	saved = map[string]checkpoint{}
	const batch = 100 // BatchGetItem's limit
	for len(keys) > 0 {
		n := min(batch, len(keys))
		pending := map[string]types.KeysAndAttributes{*a.archive: {Keys: keys[:n], ConsistentRead: aws.Bool(true)}}
		keys = keys[n:]
		for len(pending) > 0 {
			var out *ddb.BatchGetItemOutput
			err := a.policy.Do(ctx, func(ctx context.Context) error {
				var err error
				out, err = a.db.BatchGetItem(ctx, &ddb.BatchGetItemInput{RequestItems: pending})
				return err
			}, nil)
			if err != nil {
				return nil, false, fmt.Errorf("dynamostore: archive table %s, audit checkpoint: %w", *a.archive, err)
			}
			for _, item := range out.Responses[*a.archive] {
				switch kind, _ := items.GetS(item, attrCheckpoint, false); kind {
				case "stream":
					resumed = true
				case "shard":
					shard, _ := items.GetS(item, "shard", false)
					seq, _ := items.GetS(item, attrSequence, false)
					done, _ := item[attrShardDone].(*types.AttributeValueMemberBOOL)
					saved[shard] = checkpoint{seq: seq, done: done != nil && done.Value}
				}
			}
			// Unprocessed keys (throttling) are asked for again.
			pending = out.UnprocessedKeys
		}
	}
	return saved, resumed, nil
}

// saveCheckpoint records where shard's reading stands ("" shard: the
// stream's item, that a reader has started on it, kept without TTL).
func (a *Auditor) saveCheckpoint(ctx context.Context, shard string, cp checkpoint) error {
	item := a.checkpointKey(shard)
	if shard == "" {
		item[attrCheckpoint] = items.Str("stream")
	} else {
		item[attrCheckpoint] = items.Str("shard")
		item["shard"] = items.Str(shard)
		if cp.seq != "" {
			item[attrSequence] = items.Str(cp.seq)
		}
		item[attrShardDone] = &types.AttributeValueMemberBOOL{Value: cp.done}
		item[items.AttrExpires] = items.Num(items.CeilUnix(time.Now().Add(checkpointTTL)))
	}
	err := a.policy.Do(ctx, func(ctx context.Context) error {
		_, err := a.db.PutItem(ctx, &ddb.PutItemInput{TableName: a.archive, Item: item})
		return err
	}, nil)
	if err != nil {
		return fmt.Errorf("dynamostore: archive table %s, audit checkpoint: %w", *a.archive, err)
	}
	return nil
}
