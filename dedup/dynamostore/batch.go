package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/retry"
)

// The offsets table: one item per partition, under its own primary key
// (pk), with the partition's parts kept readable beside it.
const (
	offsetsSuffix = "_offsets"
	maxTableName  = 255
	offPK         = "pk"
	offGroup      = "group_id"
	offTopic      = "topic"
	offPartition  = "partition"
	offToken      = "token"
	offNext       = "next_offset"
	offMember     = "member"
)

// offsetNames alias the offset row's attributes in expressions.
var offsetNames = map[string]string{"#t": offToken, "#n": offNext}

// OffsetsTable is the name of the offsets table of batch mode beside the
// records table named table: table followed by "_offsets", the table's
// name cut to fit DynamoDB's 255 characters.
func OffsetsTable(table string) string {
	if n := maxTableName - len(offsetsSuffix); len(table) > n {
		table = table[:n]
	}
	return table + offsetsSuffix
}

// createOffsetsTable creates the offsets table of the records table
// table, when it does not exist, and waits until it is active.
func createOffsetsTable(ctx context.Context, client *ddb.Client, table string, wait time.Duration) error {
	name := aws.String(OffsetsTable(table))
	_, err := client.CreateTable(ctx, &ddb.CreateTableInput{
		TableName:            name,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(offPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(offPK), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamostore: create table %s: %w", *name, err)
	}
	waiter := ddb.NewTableExistsWaiter(client, func(o *ddb.TableExistsWaiterOptions) {
		o.MinDelay = 500 * time.Millisecond
		o.MaxDelay = 5 * time.Second
	})
	if err := waiter.Wait(ctx, &ddb.DescribeTableInput{TableName: name}, wait); err != nil {
		return fmt.Errorf("dynamostore: wait for table %s: %w", *name, err)
	}
	return nil
}

// offsetKey is p's item key in the offsets table: the group's length,
// the group, the topic and the partition ("5:sales/orders/3"), which no
// two partitions share whatever their names hold. Its client is the
// partition's home region.
func (s *Store) offsetKey(p dedup.Partition) (map[string]types.AttributeValue, *ddb.Client, error) {
	pk := strconv.Itoa(len(p.Group)) + ":" + p.Group + "/" + p.Topic + "/" + strconv.Itoa(int(p.Partition))
	if len(pk) > maxPartitionKey || !utf8.ValidString(pk) {
		return nil, nil, retry.WithClass(fmt.Errorf("dynamostore: partition %s: its group and topic must be UTF-8 and fit %d bytes together",
			p, maxPartitionKey-16), retry.Permanent)
	}
	return map[string]types.AttributeValue{offPK: str(pk)}, s.client(pk), nil
}

// Offsets returns the Store's batch view, which its Capabilities hand over
// (dedup.Capabilities.Offsets; batch.Store): each Kafka
// partition's offset row is an item of the offsets table beside the
// records table (OffsetsTable, made by CreateTable), and a batch commits
// as one TransactWriteItems of the offset row's conditional update, the
// batch's writes (Write) and its Keys as COMPLETED
// records of the records table: at most 100 items, the offset row
// included, or the commit is refused with a *dedup.CommitTooLargeError before
// anything is sent.
func (s *Store) Offsets() dedup.Offsets { return (*batchView)(s) }

// batchView is the Store seen as a dedup.Offsets.
type batchView Store

// Acquire implements dedup.Offsets: one UpdateItem that raises the token
// (from 0 for a new row, whose next offset is -1). Retried after a lost
// answer, it may raise the token twice: the lease returned holds the
// last.
func (b *batchView) Acquire(ctx context.Context, p dedup.Partition, member string) (dedup.OffsetLease, error) {
	s := (*Store)(b)
	key, client, err := s.offsetKey(p)
	if err != nil {
		return dedup.OffsetLease{}, err
	}
	in := &ddb.UpdateItemInput{
		TableName:        aws.String(OffsetsTable(s.table)),
		Key:              key,
		UpdateExpression: aws.String("SET #t = if_not_exists(#t, :zero) + :one, #n = if_not_exists(#n, :none), #m = :m, #g = :g, #tp = :tp, #p = :p"),
		ExpressionAttributeNames: map[string]string{"#t": offToken, "#n": offNext, "#m": offMember, "#g": offGroup,
			"#tp": offTopic, "#p": offPartition},
		ExpressionAttributeValues: map[string]types.AttributeValue{":zero": num(0), ":one": num(1), ":none": num(-1),
			":m": str(member), ":g": str(p.Group), ":tp": str(p.Topic), ":p": num(int64(p.Partition))},
		ReturnValues: types.ReturnValueAllNew,
	}
	var out *ddb.UpdateItemOutput
	err = s.do(ctx, storeinstr.OpBatchAcquire, func(ctx context.Context, _ int) (middleware.Metadata, error) {
		var err error
		out, err = client.UpdateItem(ctx, in)
		return metadata(out), err
	})
	if err != nil {
		return dedup.OffsetLease{}, s.batchError("acquire", p, err)
	}
	l, err := decodeOffset(p, out.Attributes)
	if err != nil {
		return dedup.OffsetLease{}, s.batchError("acquire", p, err)
	}
	return l, nil
}

// Offset implements dedup.Offsets: a strongly consistent GetItem.
func (b *batchView) Offset(ctx context.Context, p dedup.Partition) (dedup.OffsetLease, error) {
	s := (*Store)(b)
	key, client, err := s.offsetKey(p)
	if err != nil {
		return dedup.OffsetLease{}, err
	}
	item, err := s.readOffset(ctx, client, key)
	if err != nil {
		return dedup.OffsetLease{}, s.batchError("offset", p, err)
	}
	if len(item) == 0 {
		return dedup.OffsetLease{}, fmt.Errorf("dynamostore: %w: %s", dedup.ErrNoOffset, p)
	}
	l, err := decodeOffset(p, item)
	if err != nil {
		return dedup.OffsetLease{}, s.batchError("offset", p, err)
	}
	return l, nil
}

// readOffset reads an offset row's item, nil when there is none.
func (s *Store) readOffset(ctx context.Context, client *ddb.Client, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	in := &ddb.GetItemInput{TableName: aws.String(OffsetsTable(s.table)), Key: key, ConsistentRead: aws.Bool(true)}
	var out *ddb.GetItemOutput
	err := s.do(ctx, storeinstr.OpBatchOffset, func(ctx context.Context, _ int) (middleware.Metadata, error) {
		var err error
		out, err = client.GetItem(ctx, in)
		return metadata(out), err
	})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// decodeOffset reads an offset row's token, next offset and member.
func decodeOffset(p dedup.Partition, item map[string]types.AttributeValue) (dedup.OffsetLease, error) {
	l := dedup.OffsetLease{Partition: p}
	var err error
	if l.Token, err = getN(item, offToken, true, 1, 1<<62); err == nil {
		if l.Next, err = getN(item, offNext, true, -1, 1<<62); err == nil {
			l.Member, err = getS(item, offMember, false)
		}
	}
	if err != nil {
		return dedup.OffsetLease{}, retry.WithClass(fmt.Errorf("dynamostore: the offset row of %s is not one the store writes: %w", p, err), retry.Permanent)
	}
	return l, nil
}

// batchError names the partition of a failed batch call. A missing
// offsets table (the error of an offsets call names it, see
// nameMissingTable) keeps its class, Misconfigured.
func (s *Store) batchError(op string, p dedup.Partition, err error) error {
	return fmt.Errorf("dynamostore: batch %s %s on table %s: %w", op, p, OffsetsTable(s.table), missingTable(OffsetsTable(s.table), err))
}

// Commit implements dedup.Offsets: one TransactWriteItems, its items the
// offset row's update first, then the writes in order, then the keys in
// order. Cancellation reasons are read by index: the offset row's
// condition is dedup.ErrFenced (its token moved) or dedup.ErrOffsetMismatch
// (its next offset is not From); then a key's condition (a live record)
// is a *dedup.DuplicateKeysError naming every such key; then a write's is
// a *dedup.BusinessConditionError. A transaction retried after a lost
// answer that finds the row where it moves it reports success.
//
// With several regional clients (WithRegionalClients) the transaction
// goes to the partition's home region, and Keys, each homed in a region
// of its own, are refused.
func (b *batchView) Commit(ctx context.Context, c dedup.OffsetCommit) error {
	if err := c.Check(); err != nil {
		return err
	}
	s := (*Store)(b)
	if n := 1 + len(c.Writes) + len(c.Keys); n > maxTransactItems {
		return &dedup.CommitTooLargeError{Items: n, Max: maxTransactItems}
	}
	writes, err := transactItems(c.Writes)
	if err != nil {
		return err
	}
	if len(c.Keys) > 0 && len(s.clients) > 1 {
		return fmt.Errorf("dynamostore: %w: batch Keys with regional clients: a key is decided in its own home region, the batch in its partition's",
			ErrInvalidConfig)
	}
	p := c.Lease.Partition
	key, client, err := s.offsetKey(p)
	if err != nil {
		return err
	}
	items := make([]types.TransactWriteItem, 0, 1+len(writes)+len(c.Keys))
	items = append(items, types.TransactWriteItem{Update: &types.Update{
		TableName:                aws.String(OffsetsTable(s.table)),
		Key:                      key,
		UpdateExpression:         aws.String("SET #n = :next"),
		ConditionExpression:      aws.String("#t = :token AND (#n = :none OR #n = :from)"),
		ExpressionAttributeNames: offsetNames,
		ExpressionAttributeValues: map[string]types.AttributeValue{":next": num(c.Next), ":token": num(c.Lease.Token),
			":none": num(-1), ":from": num(c.From)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}})
	items = append(items, writes...)
	expires := ceilUnix(c.ExpiresAt)
	for i, k := range c.Keys {
		rk, err := s.layout.key(k)
		if err != nil {
			return err
		}
		if err := checkSize(rk, c.Lease.Member, c.PayloadHash(i), nil, ""); err != nil {
			return err
		}
		r := s.claimRequest(c.Lease.Member, c.PayloadHash(i), c.Now, 0, dedup.StatusCompleted, expires, nil, nil)
		items = append(items, r.transactItem(s.tableName, rk))
	}
	in := &ddb.TransactWriteItemsInput{TransactItems: items}
	var (
		cn      cancellation
		reasons []types.CancellationReason
		retried bool
	)
	err = s.do(ctx, storeinstr.OpBatchCommit, func(ctx context.Context, attempt int) (middleware.Metadata, error) {
		retried, cn, reasons = attempt > 1, cancellation{business: -1}, nil
		o, err := client.TransactWriteItems(ctx, in)
		md := metadata(o)
		var tce *types.TransactionCanceledException
		if err == nil || !errors.As(err, &tce) {
			return md, err
		}
		if cn, err = readCancellation(ctx, storeinstr.OpBatchCommit, tce, &s.hooks, s.tel); err != nil {
			return md, err
		}
		reasons = tce.CancellationReasons
		return md, &decision{err: tce}
	})
	var d *decision
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &d):
		return s.batchError("commit", p, s.nameMissingTable(ctx, client, items, err))
	case cn.recordFailed:
		return s.offsetRefused(ctx, client, key, c, cn.record, retried)
	}
	var dup []int
	for i := 1 + len(writes); i < len(reasons); i++ {
		if codeClass(deref(reasons[i].Code)) == retry.ConditionFailed {
			dup = append(dup, i-1-len(writes))
		}
	}
	if dup != nil {
		return &dedup.DuplicateKeysError{Indexes: dup}
	}
	return businessError(cn)
}

// offsetRefused says why the offset row's condition failed, from the row
// the cancellation returned (read afresh when it returned none):
// ErrFenced when its token is not the lease's (or it is gone),
// ErrOffsetMismatch when its next offset is not From, nil when a retried
// commit finds the row where it moves it (its first attempt committed).
func (s *Store) offsetRefused(ctx context.Context, client *ddb.Client, key map[string]types.AttributeValue, c dedup.OffsetCommit, item map[string]types.AttributeValue, retried bool) error {
	p := c.Lease.Partition
	if len(item) == 0 {
		var err error
		if item, err = s.readOffset(ctx, client, key); err != nil {
			return s.batchError("commit", p, err)
		}
	}
	if len(item) == 0 {
		return s.batchError("commit", p, fmt.Errorf("%w: no offset row", dedup.ErrFenced))
	}
	row, err := decodeOffset(p, item)
	switch {
	case err != nil:
		return s.batchError("commit", p, err)
	case row.Token != c.Lease.Token:
		return s.batchError("commit", p, fmt.Errorf("%w: token %d, stored %d", dedup.ErrFenced, c.Lease.Token, row.Token))
	case retried && row.Next == c.Next:
		return nil
	}
	return s.batchError("commit", p, fmt.Errorf("%w: commit from %d, stored next %d", dedup.ErrOffsetMismatch, c.From, row.Next))
}
