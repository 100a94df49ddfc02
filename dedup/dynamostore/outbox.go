package dynamostore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/internal/outboxcodec"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/retry"
)

// The outbox table's attributes. An entry is an item of its lane's
// partition (pk: the lane, from Destination and OrderingKey; an entry with
// no OrderingKey is a lane of its own), sorted by sk: its Seq, then its
// ID's hash, so that two entries never share an item. While Pending it
// carries psk (= sk: the local index lanePendingIndex, read with strong
// consistency, lists a lane's Pending entries in order) and pq (one of
// outboxShards: the global index pendingIndex, where a relay finds the
// lanes with Pending entries). Dispatched and Dead entries lose both and
// gain expires_at, the table's TTL.
const (
	oPK       = "pk"
	oSK       = "sk"
	oPSK      = "psk"
	oPQ       = "pq"
	oID       = "id"
	oDest     = "dest"
	oOKey     = "okey"
	oBody     = "body"
	oHeaders  = "headers"
	oState    = "state"
	oOwner    = "owner"
	oVersion  = "version"
	oAttempts = "attempts"
	oReleases = "releases" // absent until the first Release
	oError    = "last_error"
	oCreated  = "created_ms"
	oLease    = "lease_ms" // lease or retry, Unix ms; 0: never leased
	oLast     = "last"     // a lane counter's last Seq

	// laneCounterSK is the sk of an ordered lane's counter item, the last
	// Seq committed in the lane: after every entry's sk (digits first), in
	// no index. Each commit to the lane moves it on in its transaction,
	// conditioned on giving a greater Seq, so that a lane's order is the
	// order of its commits whatever the committing workers' clocks say.
	laneCounterSK = "lane"
	// laneCounterTTL is how long a lane's counter outlives its last
	// commit: far beyond any clock skew, so that a commit after it is gone
	// still takes a Seq above every one before.
	laneCounterTTL = time.Hour
	// laneConflictTries bounds the commits one call makes when a lane's
	// counter is past the Seq its clock gave.
	laneConflictTries = 5

	pendingIndex     = "pending"
	lanePendingIndex = "lane_pending"
	// outboxShards spreads the global index's Pending entries over this
	// many partitions, each within DynamoDB's write rate of one.
	outboxShards = 4
	outboxSuffix = "_outbox"
	// maxTransactSize is the most one TransactWriteItems carries.
	maxTransactSize = 4 << 20
)

// lanePendingProjection is what lane_pending holds beside the keys: what
// a take is conditioned on, and no more. DynamoDB counts a local index's
// copy of an item with the item against its 400 KB, so an index holding
// the body would halve the message an entry can carry.
var lanePendingProjection = []string{oState, oVersion, oLease}

// pendingProjection is what the global index pending holds beside the
// keys: each entry's lease or retry time, so that a relay looking for
// work passes over the lanes it cannot send now (a destination that is
// down) without reading them.
var pendingProjection = []string{oLease}

// OutboxTable is the outbox table beside the records table table: its
// name followed by "_outbox", cut with a hash of the whole when that
// would pass DynamoDB's 255 characters. CreateTable makes it with
// WithOutbox; CreateOutboxTable makes it alone.
func OutboxTable(table string) string {
	if table == "" {
		table = dedup.DefaultTable
	}
	const maxName = 255
	if len(table)+len(outboxSuffix) <= maxName {
		return table + outboxSuffix
	}
	sum := sha256.Sum256([]byte(table))
	tag := "-" + hex.EncodeToString(sum[:4])
	return table[:maxName-len(outboxSuffix)-len(tag)] + tag + outboxSuffix
}

// WithOutbox makes CreateTable create the outbox table too
// (CreateOutboxTable), where Complete and ClaimComplete keep outgoing
// messages.
func WithOutbox() TableOption {
	return tableOptionFunc(func(c *tableConfig) { c.outbox = true })
}

// CreateOutboxTable makes the outbox table of the records table table
// (OutboxTable): on-demand billing, pk (S) and sk (S), the local index
// lane_pending (pk, psk) projecting state, version and lease_ms only, the
// global index pending (pq, sk) projecting lease_ms only, and TTL on
// expires_at. It is idempotent and returns once the table is ACTIVE.
func CreateOutboxTable(ctx context.Context, client *ddb.Client, table string, opts ...TableOption) error {
	cfg := tableConfig{waitTimeout: 5 * time.Minute}
	for _, o := range opts {
		if o != nil {
			o.applyTable(&cfg)
		}
	}
	name := OutboxTable(table)
	s := func(n string) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(n), AttributeType: types.ScalarAttributeTypeS}
	}
	keys := func(h, r string) []types.KeySchemaElement {
		return []types.KeySchemaElement{{AttributeName: aws.String(h), KeyType: types.KeyTypeHash}, {AttributeName: aws.String(r), KeyType: types.KeyTypeRange}}
	}
	_, err := client.CreateTable(ctx, &ddb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{s(oPK), s(oSK), s(oPSK), s(oPQ)},
		KeySchema:            keys(oPK, oSK),
		LocalSecondaryIndexes: []types.LocalSecondaryIndex{{IndexName: aws.String(lanePendingIndex), KeySchema: keys(oPK, oPSK),
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: lanePendingProjection}}},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{IndexName: aws.String(pendingIndex), KeySchema: keys(oPQ, oSK),
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: pendingProjection}}},
		BillingMode: types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamostore: create outbox table %s: %w", name, err)
	}
	waiter := ddb.NewTableExistsWaiter(client, func(o *ddb.TableExistsWaiterOptions) {
		o.MinDelay = 500 * time.Millisecond
		o.MaxDelay = 5 * time.Second
	})
	desc, err := waiter.WaitForOutput(ctx, &ddb.DescribeTableInput{TableName: aws.String(name)}, cfg.waitTimeout)
	if err != nil {
		return fmt.Errorf("dynamostore: wait for outbox table %s: %w", name, err)
	}
	if err := checkOutboxSchema(desc.Table); err != nil {
		return fmt.Errorf("dynamostore: outbox table %s: %w", name, err)
	}
	return ensureTTL(ctx, client, name)
}

// checkOutboxSchema refuses a table without the outbox's keys and indexes.
func checkOutboxSchema(t *types.TableDescription) error {
	if !sameKeys(t.KeySchema, oPK, oSK) {
		return errors.New("the key schema is not pk (HASH), sk (RANGE)")
	}
	if !slices.ContainsFunc(t.LocalSecondaryIndexes, func(i types.LocalSecondaryIndexDescription) bool {
		return aws.ToString(i.IndexName) == lanePendingIndex && sameKeys(i.KeySchema, oPK, oPSK) && projects(i.Projection, lanePendingProjection)
	}) {
		return fmt.Errorf("no local index %s on pk, psk projecting %s", lanePendingIndex, strings.Join(lanePendingProjection, ", "))
	}
	if !slices.ContainsFunc(t.GlobalSecondaryIndexes, func(i types.GlobalSecondaryIndexDescription) bool {
		return aws.ToString(i.IndexName) == pendingIndex && sameKeys(i.KeySchema, oPQ, oSK)
	}) {
		return fmt.Errorf("no global index %s on pq, sk", pendingIndex)
	}
	return nil
}

// projects reports whether an index of projection p holds attrs.
func projects(p *types.Projection, attrs []string) bool {
	switch {
	case p == nil:
		return false
	case p.ProjectionType == types.ProjectionTypeAll:
		return true
	case p.ProjectionType == types.ProjectionTypeInclude:
		return !slices.ContainsFunc(attrs, func(a string) bool { return !slices.Contains(p.NonKeyAttributes, a) })
	}
	return false
}

func sameKeys(ks []types.KeySchemaElement, hash, rng string) bool {
	if len(ks) != 2 {
		return false
	}
	got := map[types.KeyType]string{ks[0].KeyType: aws.ToString(ks[0].AttributeName), ks[1].KeyType: aws.ToString(ks[1].AttributeName)}
	return got[types.KeyTypeHash] == hash && got[types.KeyTypeRange] == rng
}

// ErrOutboxTooLarge: an outgoing message whose entry passes DynamoDB's
// item limit, or a commit whose transaction passes its size limit. The
// error is an *OutboxTooLargeError.
var ErrOutboxTooLarge = errors.New("dynamostore: outgoing messages too large for one transaction")

// OutboxTooLargeError says which DynamoDB limit a commit's outgoing
// messages pass: "item" (an entry of more than 400 KB, message Index,
// counting its copy in the lane_pending index and room for its marks) or
// "transaction" (a TransactWriteItems of more than 4 MB, Index -1). It is
// the message's fault (retry class Permanent; errors.Is
// dedup.ErrRecordTooLarge too): nothing is committed, and the consumer
// dead-letters the message. How many items fit (100, the record and the
// business writes among them) is checked first, as a
// *dedup.TooManyWritesError.
type OutboxTooLargeError struct {
	Limit     string // "item" or "transaction"
	Index     int
	Size, Max int
}

func (e *OutboxTooLargeError) Error() string {
	if e.Limit == "item" {
		return fmt.Sprintf("dynamostore: outgoing message %d: its entry of %d bytes (with its index copy and room for its marks) passes DynamoDB's item limit of %d", e.Index, e.Size, e.Max)
	}
	return fmt.Sprintf("dynamostore: the commit with its outgoing messages is %d bytes, past DynamoDB's transaction limit of %d", e.Size, e.Max)
}

// Is makes errors.Is(err, ErrOutboxTooLarge) and errors.Is(err,
// dedup.ErrRecordTooLarge) true.
func (e *OutboxTooLargeError) Is(target error) bool {
	return target == ErrOutboxTooLarge || target == dedup.ErrRecordTooLarge
}

// RetryClass: the same messages never fit.
func (e *OutboxTooLargeError) RetryClass() retry.Class { return retry.Permanent }

// laneKey is the partition of an entry's lane.
func laneKey(id string, m outbox.Message) string {
	h := sha256.New()
	if m.OrderingKey == "" {
		h.Write([]byte(id))
		return "u#" + hex.EncodeToString(h.Sum(nil)[:16])
	}
	for _, p := range []string{m.Destination, m.OrderingKey} {
		_ = binary.Write(h, binary.BigEndian, uint64(len(p)))
		h.Write([]byte(p))
	}
	return "l#" + hex.EncodeToString(h.Sum(nil)[:16])
}

// sortKey is an entry's sk: its Seq, fixed width so that strings sort as
// numbers, then its ID's hash.
func sortKey(seq int64, id string) string {
	sum := sha256.Sum256([]byte(id))
	return fmt.Sprintf("%020d#%s", seq, hex.EncodeToString(sum[:8]))
}

// nextSeq is the Seq base of a commit at now: its Unix microseconds,
// above every base this Store gave or saw before, times 1000; entry i
// takes base+i. Its lanes' counters hold the commit to a Seq above the
// last one of each lane (see laneCounterSK).
func (s *Store) nextSeq(now time.Time) int64 {
	for {
		last := s.outboxSeq.Load()
		us := max(now.UnixMicro(), last+1)
		if s.outboxSeq.CompareAndSwap(last, us) {
			return us * 1000
		}
	}
}

// sawSeq raises the Seq bases this Store gives above seq, a lane's last.
func (s *Store) sawSeq(seq int64) {
	for {
		last := s.outboxSeq.Load()
		if last >= seq/1000 || s.outboxSeq.CompareAndSwap(last, seq/1000) {
			return
		}
	}
}

// laneConflictError is a commit refused because a lane's counter was past
// the Seq the commit gave it: another worker, its clock ahead, committed
// to the lane since. Nothing was written; the Store commits again above
// Last, and returns it only after laneConflictTries (a failure of the
// moment).
type laneConflictError struct {
	Table string
	Last  int64
}

func (e *laneConflictError) Error() string {
	return fmt.Sprintf("dynamostore: outbox table %s: an ordered lane took later commits %d times while this one was made", e.Table, laneConflictTries)
}

// RetryClass: the next commit takes a Seq above the lane's.
func (e *laneConflictError) RetryClass() retry.Class { return retry.Transient }

// laneCounter reports whether w moves a lane's counter on.
func laneCounter(w types.TransactWriteItem) bool {
	return w.Update != nil && itemS(w.Update.Key, oSK) == laneCounterSK
}

// commitError is the error of a transaction cancelled by a write's
// condition (c.business): the lanes' counters' last Seq when only they
// failed, a *laneConflictError; else the business write's error.
func (s *Store) commitError(ctx context.Context, c cancellation, writes []types.TransactWriteItem) error {
	if c.business < 0 || c.business >= len(writes) || !laneCounter(writes[c.business]) {
		return businessError(c)
	}
	// The business writes come first: the first write that failed is a
	// counter, so each that failed is one.
	last := int64(-1)
	for i, r := range c.reasons {
		if i == 0 || i > len(writes) || codeClass(deref(r.Code)) != retry.ConditionFailed {
			continue
		}
		it := r.Item
		if len(it) == 0 {
			// ALL_OLD is asked for, not promised: the counter is read.
			var err error
			if it, err = s.laneCounterItem(ctx, writes[i-1].Update); err != nil {
				return err
			}
		}
		last = max(last, itemN(it, oLast))
	}
	return &laneConflictError{Table: OutboxTable(s.table), Last: last}
}

// laneCounterItem reads the counter that u moves on, strongly consistent.
func (s *Store) laneCounterItem(ctx context.Context, u *types.Update) (map[string]types.AttributeValue, error) {
	var out *ddb.GetItemOutput
	err := s.do(ctx, storeinstr.OpOutboxLease, func(ctx context.Context, _ int) (middleware.Metadata, error) {
		var err error
		out, err = s.clients[0].GetItem(ctx, &ddb.GetItemInput{TableName: u.TableName, Key: u.Key, ConsistentRead: aws.Bool(true)})
		return metadata(out), err
	})
	if err != nil {
		return nil, fmt.Errorf("dynamostore: outbox table %s: reading a lane's counter: %w", aws.ToString(u.TableName), err)
	}
	return out.Item, nil
}

// againAboveLanes runs commit, and again while a lane's counter was past
// the Seq it gave, each time above the lane's last Seq, at most
// laneConflictTries times.
func againAboveLanes[T any](s *Store, commit func() (T, error)) (T, error) {
	for try := 1; ; try++ {
		v, err := commit()
		var lc *laneConflictError
		if try == laneConflictTries || !errors.As(err, &lc) {
			return v, err
		}
		s.sawSeq(lc.Last)
	}
}

// outboxItems are the Puts of msgs as the entries of the input whose key
// is key, committed at now, then the Update of each ordered lane's
// counter, checked against DynamoDB's limits with the record (recordSize
// bytes) and writes they join: 100 items, 400 KB an item, 4 MB a
// transaction.
func (s *Store) outboxItems(key string, msgs []outbox.Message, now time.Time, writes []types.TransactWriteItem, recordSize int) ([]types.TransactWriteItem, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	lanes := map[string]bool{}
	for i, m := range msgs {
		if m.OrderingKey != "" {
			lanes[laneKey(outbox.ID(key, i), m)] = true
		}
	}
	if n := len(writes) + len(msgs) + len(lanes); 1+n > maxTransactItems {
		return nil, &dedup.TooManyWritesError{Got: n, Max: maxTransactItems - 1}
	}
	total := recordSize
	for _, w := range writes {
		total += writeSize(w)
	}
	base := s.nextSeq(now)
	table := aws.String(OutboxTable(s.table))
	out := make([]types.TransactWriteItem, len(msgs), len(msgs)+len(lanes))
	type span struct{ first, last int64 }
	var order []string
	spans := map[string]span{}
	for i, m := range msgs {
		id := outbox.ID(key, i)
		seq := base + int64(i)
		lane, sk := laneKey(id, m), sortKey(seq, id)
		if lanes[lane] {
			sp, ok := spans[lane]
			if !ok {
				order = append(order, lane)
				sp.first = seq
			}
			sp.last = seq
			spans[lane] = sp
		}
		item := map[string]types.AttributeValue{
			oPK: str(lane), oSK: str(sk), oPSK: str(sk), oPQ: str(pendingShard(lane)),
			oID: bin([]byte(id)), oDest: bin([]byte(m.Destination)), oOKey: bin([]byte(m.OrderingKey)),
			oBody: bin(m.Body), oHeaders: bin(outboxcodec.Encode(m.Headers)), oState: str(string(outbox.Pending)),
			oOwner: str(""), oVersion: num(0), oAttempts: num(0), oError: str(""), oCreated: num(now.UnixMilli()), oLease: num(0),
		}
		size := entrySize(item)
		if size > maxItemSize {
			return nil, &OutboxTooLargeError{Limit: "item", Index: i, Size: size, Max: maxItemSize}
		}
		total += size
		out[i] = types.TransactWriteItem{Put: &types.Put{TableName: table, Item: item}}
	}
	exp := num(ceilUnix(now.Add(laneCounterTTL)))
	for _, lane := range order {
		w := types.TransactWriteItem{Update: &types.Update{TableName: table,
			Key:                                 map[string]types.AttributeValue{oPK: str(lane), oSK: str(laneCounterSK)},
			UpdateExpression:                    aws.String("SET #last = :last, #exp = :exp"),
			ConditionExpression:                 aws.String("attribute_not_exists(#last) OR #last < :first"),
			ExpressionAttributeNames:            map[string]string{"#last": oLast, "#exp": attrExpires},
			ExpressionAttributeValues:           map[string]types.AttributeValue{":last": num(spans[lane].last), ":first": num(spans[lane].first), ":exp": exp},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}}
		total += writeSize(w)
		out = append(out, w)
	}
	if total > maxTransactSize {
		return nil, &OutboxTooLargeError{Limit: "transaction", Index: -1, Size: total, Max: maxTransactSize}
	}
	return out, nil
}

// markReserve is room an entry keeps for what its marks add: a reason of
// up to 1,024 bytes (dedup.StorableReason), a relay's owner token, and
// numbers that grow (lease, version, attempts, releases, expires_at).
const markReserve = 1024 + maxIdentifierLen + 64

// entrySize is what DynamoDB counts of an entry's item against its 400
// KB, once marked: the item, its copy in the local index lane_pending
// (DynamoDB counts it too: keys and projected attributes), and
// markReserve.
func entrySize(item map[string]types.AttributeValue) int {
	n := itemSize(item) + markReserve
	for _, a := range append([]string{oPK, oSK, oPSK}, lanePendingProjection...) {
		n += len(a) + valueSize(item[a])
	}
	return n
}

// writeSize estimates what a business write adds to a transaction's
// payload: a Put's item, the key and values of the others (an Update's
// values may be as large as an item).
func writeSize(w types.TransactWriteItem) int {
	switch {
	case w.Put != nil:
		return itemSize(w.Put.Item) + itemSize(w.Put.ExpressionAttributeValues)
	case w.Update != nil:
		return itemSize(w.Update.Key) + itemSize(w.Update.ExpressionAttributeValues) + len(aws.ToString(w.Update.UpdateExpression))
	case w.Delete != nil:
		return itemSize(w.Delete.Key) + itemSize(w.Delete.ExpressionAttributeValues)
	case w.ConditionCheck != nil:
		return itemSize(w.ConditionCheck.Key) + itemSize(w.ConditionCheck.ExpressionAttributeValues)
	}
	return 0
}

// bin is a binary attribute; DynamoDB refuses an empty one as a key only,
// and takes nil as no value: an empty value is kept as one zero-length.
func bin(b []byte) types.AttributeValue {
	if b == nil {
		b = []byte{}
	}
	return &types.AttributeValueMemberB{Value: b}
}

// pendingShard is the global index partition of a lane's Pending entries.
func pendingShard(lane string) string {
	sum := sha256.Sum256([]byte(lane))
	return "p#" + strconv.Itoa(int(sum[0])%outboxShards)
}

// Outbox is the relay's view of the Store's outbox table (outbox.Store),
// on the Store's first client, which the Store's Capabilities hand over
// (and Store.Outbox returns).
//
// Lease keeps each lane's order and fences relays with conditional
// writes: it finds the lanes with Pending entries in the global index
// pending, its shards read side by side (eventually consistent: a commit
// is found a moment later), passing over those whose oldest entry is held
// or waits for a retry (the index holds each entry's lease_ms: each take
// and retry writes the index too, the price of not reading every held
// lane on every pass), then reads each lane's Pending entries in order
// from the local index lane_pending with a strongly consistent query (the
// lanes side by side, up to 32 queries at once), stopping at the first
// that is held or due for a retry later, and takes them with one
// TransactWriteItems, each Update conditioned on the version it read and
// a free lease (the query read them whole: nothing is read back). An
// entry another relay took in between cuts its lane there, and the rest
// is taken again; when the transaction fails
// otherwise (or a pass is larger than a transaction), the entries are
// taken with an UpdateItem each, the lanes side by side, a lane's entries
// one after another. Dispatched marks a pass in transactions of up to 100
// entries, and one by one when one is refused. An item it cannot read stops its own lane
// only: Lease returns the entries of the other lanes with an error
// naming the table. So two relays never hold one entry, and a
// lane's entries are leased only behind every earlier one.
//
// Marks (Dispatched, Retry, Dead) address an entry by the item this
// Outbox leased it from: a relay marks what it leased through the same
// Outbox; a lease it does not know is lost (ErrLeaseLost). Dispatched and
// Dead entries carry expires_at, the table's TTL.
type Outbox struct {
	s     *Store
	table *string
	mu    sync.Mutex
	// leased is where each entry this Outbox leased lives, until it is
	// marked or its lease is long over.
	leased map[string]leasedItem
}

type leasedItem struct {
	key   map[string]types.AttributeValue
	until time.Time
}

var _ outbox.Store = (*Outbox)(nil)

// Outbox returns the relay's view of the outbox table (see type Outbox),
// the one the Store's Capabilities hand over (dedup.Capabilities.Outbox):
// Complete and ClaimComplete commit outgoing messages with COMPLETED, in
// the same TransactWriteItems.
func (s *Store) Outbox() outbox.Store { return s.outbox }

// forgetAfter is how long past its lease an unmarked entry's item is kept
// in the Outbox's memory.
const forgetAfter = time.Hour

func (o *Outbox) client() *ddb.Client { return o.s.clients[0] }

// leaseParallel bounds the calls one Lease (and one Dispatched) has in
// flight at once: the lanes are read and taken side by side, each lane's
// entries one after another, in order. Enough calls to overlap a pass's
// round trips; few enough that one relay neither drains the client's
// connections nor bursts on the table's partitions.
const leaseParallel = 32

// Lease implements outbox.Store (see type Outbox).
func (o *Outbox) Lease(ctx context.Context, req outbox.LeaseRequest) ([]outbox.Entry, error) {
	if req.Max <= 0 {
		return nil, nil
	}
	o.forget(req.Now)
	lanes, err := o.pendingLanes(ctx, req.Max, req.Now)
	if err != nil {
		return nil, err
	}
	// Read the lanes, a wave at a time, until they offer Max entries: each
	// lane's entries that may be leased now, up to its first held one.
	ls := make([]leaseLane, len(lanes))
	offered, read := 0, 0
	for read < len(lanes) && offered < req.Max && ctx.Err() == nil {
		wave := min(len(lanes)-read, leaseParallel, max(req.Max-offered, 1))
		parallel(wave, func(i int) {
			l := &ls[read+i]
			items, err := o.lanePending(ctx, lanes[read+i], req.Max)
			if err != nil {
				l.err = err
				return
			}
			for _, it := range items {
				_, leaseMS, err := laneHead(it)
				if err == nil {
					_, err = decodeEntry(it)
				}
				if err != nil {
					// An item this store did not write holds up its own
					// lane, whose order it may belong to, and no other.
					l.err = o.wrap("lease", err)
					break
				}
				if leaseMS > req.Now.UnixMilli() {
					break // held, or due for a retry later: the lane waits
				}
				l.items = append(l.items, it)
			}
		})
		for i := read; i < read+wave; i++ {
			ls[i].quota = min(len(ls[i].items), req.Max-offered)
			offered += ls[i].quota
		}
		read += wave
	}
	// Take them: in one transaction when they fit; what it cannot take
	// (more than a transaction holds, or it failed), the lanes side by
	// side, each lane's entries in order, stopping at the first another
	// relay took in between.
	if offered <= maxTransactItems && offered > 1 && o.takeTogether(ctx, ls[:read], req) {
		return leasedOf(ls[:read])
	}
	parallel(read, func(i int) {
		l := &ls[i]
		for _, it := range l.items[:l.quota] {
			version, _, _ := laneHead(it)
			taken, ok, err := o.take(ctx, it, version, req)
			if err != nil {
				l.err = errors.Join(l.err, err)
				return
			}
			if !ok {
				return // another relay took it
			}
			got, err := o.taken(taken, req.LeaseUntil)
			if err != nil {
				l.err = errors.Join(l.err, o.wrap("lease", err))
				return
			}
			l.got = append(l.got, got)
		}
	})
	return leasedOf(ls[:read])
}

// leaseLane is a lane as Lease reads and takes it.
type leaseLane struct {
	items []map[string]types.AttributeValue
	err   error // the read failed, or an item stopped the lane
	quota int   // how many of items this Lease takes
	got   []outbox.Entry
}

// leasedOf is what Lease returns of ls: each lane's entries taken, in
// order, lane after lane, and the errors that stopped lanes.
func leasedOf(ls []leaseLane) ([]outbox.Entry, error) {
	var out []outbox.Entry
	var errs []error
	for i := range ls {
		out = append(out, ls[i].got...)
		if ls[i].err != nil {
			errs = append(errs, ls[i].err)
		}
	}
	return out, errors.Join(errs...)
}

// takeTries bounds the transactions one takeTogether sends: each one
// another relay beats to an entry drops that entry's lane from there on.
const takeTries = 3

// takeTogether takes the lanes' entries (each lane's quota) in one
// TransactWriteItems, each Update conditioned as take's (keepTaken). An entry another relay took in
// between (its condition refused) cuts its lane there and the rest is
// tried again. It reports false, having taken nothing, when the
// transaction failed otherwise: the caller takes them one by one, and an
// entry the transaction took unseen is found held and left to its
// lease's end.
func (o *Outbox) takeTogether(ctx context.Context, ls []leaseLane, req outbox.LeaseRequest) bool {
	type pick struct{ lane, at int }
	for range takeTries {
		var picks []pick
		var items []types.TransactWriteItem
		for i := range ls {
			for j, it := range ls[i].items[:ls[i].quota] {
				version, _, _ := laneHead(it)
				picks = append(picks, pick{i, j})
				items = append(items, types.TransactWriteItem{Update: o.takeUpdate(it, version, req)})
			}
		}
		if len(items) == 0 {
			return true
		}
		// The SDK gives the call an idempotency token: a retry of a
		// transaction that committed unseen succeeds again.
		in := &ddb.TransactWriteItemsInput{TransactItems: items}
		err := o.s.do(ctx, storeinstr.OpOutboxLease, func(ctx context.Context, _ int) (middleware.Metadata, error) {
			out, err := o.client().TransactWriteItems(ctx, in)
			return metadata(out), err
		})
		var tce *types.TransactionCanceledException
		if errors.As(err, &tce) && len(tce.CancellationReasons) == len(picks) {
			cut := false
			for k, r := range tce.CancellationReasons {
				if aws.ToString(r.Code) == "ConditionalCheckFailed" {
					l := &ls[picks[k].lane]
					l.quota = min(l.quota, picks[k].at)
					cut = true
				}
			}
			if cut {
				continue
			}
		}
		if err != nil {
			return false
		}
		o.keepTaken(ls, req)
		return true
	}
	return false
}

// takeUpdate is take's conditional update of the entry of it, as a
// transaction's item.
func (o *Outbox) takeUpdate(it map[string]types.AttributeValue, version int64, req outbox.LeaseRequest) *types.Update {
	return &types.Update{
		TableName:                aws.String(aws.ToString(o.table)),
		Key:                      map[string]types.AttributeValue{oPK: it[oPK], oSK: it[oSK]},
		UpdateExpression:         aws.String("SET #owner = :owner, #version = :v1, #lease = :until"),
		ConditionExpression:      aws.String("#state = :pending AND #version = :v AND #lease <= :now"),
		ExpressionAttributeNames: map[string]string{"#owner": oOwner, "#version": oVersion, "#lease": oLease, "#state": oState},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":owner": str(req.Owner), ":v1": num(version + 1), ":until": num(req.LeaseUntil.UnixMilli()),
			":pending": str(string(outbox.Pending)), ":v": num(version), ":now": num(req.Now.UnixMilli()),
		},
	}
}

// keepTaken records, in each lane's got, the entries just taken (each
// lane's quota): the transaction took each at the version read, so that
// each is the item read with the take's owner, version and lease, and
// needs no second read. An item that cannot be read stops its lane with
// the error; Lease checks each one before taking it.
func (o *Outbox) keepTaken(ls []leaseLane, req outbox.LeaseRequest) {
	for i := range ls {
		l := &ls[i]
		for _, it := range l.items[:l.quota] {
			version, _, _ := laneHead(it)
			e, err := o.taken(takenItem(it, version, req), req.LeaseUntil)
			if err != nil {
				l.err = errors.Join(l.err, o.wrap("lease", err))
				break
			}
			l.got = append(l.got, e)
		}
	}
}

// takenItem is it, read at version, as take's update leaves it.
func takenItem(it map[string]types.AttributeValue, version int64, req outbox.LeaseRequest) map[string]types.AttributeValue {
	out := maps.Clone(it)
	out[oOwner], out[oVersion], out[oLease] = str(req.Owner), num(version+1), num(req.LeaseUntil.UnixMilli())
	return out
}

// parallel runs f(0) to f(n-1), up to leaseParallel at once, and returns
// once all have.
func parallel(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(n, leaseParallel) {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// forget drops the items of leases long over.
func (o *Outbox) forget(now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, it := range o.leased {
		if now.Sub(it.until) > forgetAfter {
			delete(o.leased, id)
		}
	}
}

// discoveryPages bounds the pages of a shard of the pending index one
// Lease reads: lanes that cannot be sent now at the front of a shard
// (held, waiting out a retry, or one long lane whose entries are read one
// page after another) hide the lanes behind them no further than that.
// The first page is small (a lease's worth); the others are wider.
const (
	discoveryPages    = 8
	discoveryPageSize = 1000
)

// pendingLanes lists up to max lanes per shard of the pending index whose
// oldest Pending entry may be leased at now, oldest first. A lane is
// judged by its first entry in the index, its head: the index holds each
// entry's lease_ms, so a lane whose head is held or waits for a retry is
// passed over, not counted, and the pages after it are read. (An index
// made without lease_ms judges none held.)
func (o *Outbox) pendingLanes(ctx context.Context, max int, now time.Time) ([]string, error) {
	// The shards are read side by side (all of them: there are few), each
	// into its own slice, and joined in shard order, so that the lanes come
	// out as when read one after another.
	shards := make([][]laneHeadAt, outboxShards)
	err := sideBySide(ctx, outboxShards, func(ctx context.Context, n int) error {
		heads, err := o.shardHeads(ctx, n, max, now.UnixMilli())
		shards[n] = heads
		return err
	})
	if err != nil {
		return nil, err
	}
	heads := slices.Concat(shards...)
	slices.SortFunc(heads, func(a, b laneHeadAt) int { return strings.Compare(a.sk, b.sk) })
	lanes := make([]string, len(heads))
	for i, h := range heads {
		lanes[i] = h.lane
	}
	return lanes, nil
}

// laneHeadAt is a lane whose head may be leased, and the head's sort key.
type laneHeadAt struct{ lane, sk string }

// shardHeads lists up to max lanes of shard n of the pending index whose
// head may be leased at nowMS, in the index's order.
func (o *Outbox) shardHeads(ctx context.Context, n, max int, nowMS int64) ([]laneHeadAt, error) {
	in := &ddb.QueryInput{
		TableName: o.table, IndexName: aws.String(pendingIndex),
		KeyConditionExpression:    aws.String("#pq = :pq"),
		ExpressionAttributeNames:  map[string]string{"#pq": oPQ},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pq": str("p#" + strconv.Itoa(n))},
		Limit:                     aws.Int32(int32(min(max*4, discoveryPageSize))),
	}
	var heads []laneHeadAt
	seen := map[string]bool{} // lanes met in this shard, free or not
	for page := 0; page < discoveryPages && len(heads) < max; page++ {
		items, next, err := o.query(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			lane := itemS(it, oPK)
			if seen[lane] {
				continue
			}
			seen[lane] = true
			if itemN(it, oLease) > nowMS {
				continue // its head cannot be leased now
			}
			heads = append(heads, laneHeadAt{lane: lane, sk: itemS(it, oSK)})
		}
		if len(next) == 0 {
			break
		}
		in.ExclusiveStartKey = next
		in.Limit = aws.Int32(discoveryPageSize)
	}
	return heads, nil
}

// sideBySide runs f(ctx, 0) to f(ctx, n-1) at once, each in a goroutine
// it waits for, and returns the first error one returned: that error
// cancels the context the others run under, so that they stop early.
func sideBySide(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := range n {
		wg.Go(func() {
			if err := f(ctx, i); err != nil {
				once.Do(func() {
					first = err
					cancel(err)
				})
			}
		})
	}
	wg.Wait()
	return first
}

// lanePending reads up to n of a lane's Pending entries, in order, with
// strong consistency: whole, the index fetching from the table what it
// does not hold, so that an entry taken needs no second read.
func (o *Outbox) lanePending(ctx context.Context, lane string, n int) ([]map[string]types.AttributeValue, error) {
	in := &ddb.QueryInput{
		TableName: o.table, IndexName: aws.String(lanePendingIndex), ConsistentRead: aws.Bool(true),
		Select:                    types.SelectAllAttributes,
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": oPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(lane)},
		Limit:                     aws.Int32(int32(min(n, 1000))),
	}
	items, _, err := o.query(ctx, in)
	return items, err
}

// query runs one Query page of Lease under the instruments, and returns
// its items and where the next page starts (none: the last).
func (o *Outbox) query(ctx context.Context, in *ddb.QueryInput) ([]map[string]types.AttributeValue, map[string]types.AttributeValue, error) {
	var out *ddb.QueryOutput
	err := o.s.do(ctx, storeinstr.OpOutboxLease, func(ctx context.Context, _ int) (middleware.Metadata, error) {
		var err error
		out, err = o.client().Query(ctx, in)
		if out == nil {
			return middleware.Metadata{}, err
		}
		return out.ResultMetadata, err
	})
	if err != nil {
		return nil, nil, o.wrap("lease", err)
	}
	return out.Items, out.LastEvaluatedKey, nil
}

// laneHead reads what lane_pending holds of an entry: its version and
// lease (Unix ms; 0 when never leased).
func laneHead(it map[string]types.AttributeValue) (version, leaseMS int64, err error) {
	id := dedup.KeyHash(itemS(it, oPK) + "/" + itemS(it, oSK))
	if st := itemS(it, oState); st != string(outbox.Pending) {
		return 0, 0, fmt.Errorf("dynamostore: outbox item %s in the lane_pending index: state %q", id, st)
	}
	if version = itemN(it, oVersion); version < 0 {
		return 0, 0, fmt.Errorf("dynamostore: outbox item %s: no version", id)
	}
	return version, max(itemN(it, oLease), 0), nil
}

// take leases the entry of it, at version, to req.Owner, if it is still
// at that version and free, and returns the entry's item as taken; ok is
// false when another relay took it first.
func (o *Outbox) take(ctx context.Context, it map[string]types.AttributeValue, version int64, req outbox.LeaseRequest) (map[string]types.AttributeValue, bool, error) {
	key := map[string]types.AttributeValue{oPK: it[oPK], oSK: it[oSK]}
	in := &ddb.UpdateItemInput{
		TableName: o.table, Key: key,
		UpdateExpression:         aws.String("SET #owner = :owner, #version = :v1, #lease = :until"),
		ConditionExpression:      aws.String("#state = :pending AND #version = :v AND #lease <= :now"),
		ExpressionAttributeNames: map[string]string{"#owner": oOwner, "#version": oVersion, "#lease": oLease, "#state": oState},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":owner": str(req.Owner), ":v1": num(version + 1), ":until": num(req.LeaseUntil.UnixMilli()),
			":pending": str(string(outbox.Pending)), ":v": num(version), ":now": num(req.Now.UnixMilli()),
		},
		ReturnValues: types.ReturnValueAllNew,
	}
	var out *ddb.UpdateItemOutput
	retried := false
	err := o.s.do(ctx, storeinstr.OpOutboxLease, func(ctx context.Context, attempt int) (middleware.Metadata, error) {
		retried = attempt > 1
		var err error
		out, err = o.client().UpdateItem(ctx, in)
		return metadata(out), err
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) && !retried {
		return nil, false, nil
	}
	if err != nil {
		// A retried take that lost its condition may have committed
		// unseen: the lane is left alone this time, and the entry's lease,
		// if it was taken, ends on its own.
		if errors.As(err, &ccf) {
			return nil, false, nil
		}
		return nil, false, o.wrap("lease", err)
	}
	return out.Attributes, true, nil
}

// taken reads the entry of an item just taken, and remembers where it
// lives for its marks. An item it cannot read is left to its lease's
// end, unmarked.
func (o *Outbox) taken(it map[string]types.AttributeValue, until time.Time) (outbox.Entry, error) {
	got, err := decodeEntry(it)
	if err != nil {
		return outbox.Entry{}, err
	}
	o.mu.Lock()
	if o.leased == nil {
		o.leased = map[string]leasedItem{}
	}
	o.leased[got.ID] = leasedItem{key: map[string]types.AttributeValue{oPK: it[oPK], oSK: it[oSK]}, until: until}
	o.mu.Unlock()
	return got, nil
}

// itemOf is where the entry of l lives, as this Outbox leased it.
func (o *Outbox) itemOf(l outbox.Lease) (map[string]types.AttributeValue, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	it, ok := o.leased[l.ID]
	return it.key, ok
}

func (o *Outbox) done(id string) {
	o.mu.Lock()
	delete(o.leased, id)
	o.mu.Unlock()
}

// lost is the error of a mark whose lease is no longer held.
func (o *Outbox) lost(op string, l outbox.Lease) error {
	return fmt.Errorf("dynamostore: outbox %s on table %s: %w: entry %s version %d", op, aws.ToString(o.table), outbox.ErrLeaseLost,
		dedup.KeyHash(l.ID), l.Version)
}

func (o *Outbox) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("dynamostore: outbox %s on table %s: %w", op, aws.ToString(o.table), missingTable(aws.ToString(o.table), err))
}

// mark runs the fenced update of l's entry: set, with the fence (state
// Pending, owner, version) as its condition. A retry whose first attempt
// committed unseen is recognised by settled, given the item as it is.
func (o *Outbox) mark(ctx context.Context, op, instrOp string, l outbox.Lease, update string, names map[string]string,
	values map[string]types.AttributeValue, settled func(map[string]types.AttributeValue) bool) error {
	return o.markAgain(ctx, op, instrOp, l, update, names, values, settled, false)
}

// markUpdate is the fenced update of the entry at key, leased as l.
func (o *Outbox) markUpdate(key map[string]types.AttributeValue, l outbox.Lease, update string, names map[string]string,
	values map[string]types.AttributeValue) *types.Update {
	names = maps.Clone(names)
	names["#state"], names["#owner"], names["#version"] = oState, oOwner, oVersion
	values = maps.Clone(values)
	values[":pending"], values[":fowner"], values[":fv"] = str(string(outbox.Pending)), str(l.Owner), num(l.Version)
	return &types.Update{
		TableName: o.table, Key: key, UpdateExpression: aws.String(update),
		ConditionExpression:       aws.String("#state = :pending AND #owner = :fowner AND #version = :fv"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}
}

// markAgain is mark; maybeDone says an earlier call may have written the
// mark unseen (a transaction that failed), so that a refused condition
// is checked with settled from the first attempt.
func (o *Outbox) markAgain(ctx context.Context, op, instrOp string, l outbox.Lease, update string, names map[string]string,
	values map[string]types.AttributeValue, settled func(map[string]types.AttributeValue) bool, maybeDone bool) error {
	key, ok := o.itemOf(l)
	if !ok {
		return o.lost(op, l)
	}
	u := o.markUpdate(key, l, update, names, values)
	in := &ddb.UpdateItemInput{
		TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression,
		ConditionExpression:                 u.ConditionExpression,
		ExpressionAttributeNames:            u.ExpressionAttributeNames,
		ExpressionAttributeValues:           u.ExpressionAttributeValues,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	retried := maybeDone
	err := o.s.do(ctx, instrOp, func(ctx context.Context, attempt int) (middleware.Metadata, error) {
		retried = retried || attempt > 1
		out, err := o.client().UpdateItem(ctx, in)
		return metadata(out), err
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		o.done(l.ID)
		return nil
	case errors.As(err, &ccf):
		if retried && len(ccf.Item) > 0 && settled(ccf.Item) {
			o.done(l.ID)
			return nil
		}
		return o.lost(op, l)
	}
	return o.wrap(op, err)
}

// Dispatched implements outbox.Store: the marks go in transactions of up
// to 100 entries, side by side, one call for a pass of the default size.
// A transaction refused (a lease lost, a conflict, a failure) marks its
// entries one by one, each one's fate its own.
func (o *Outbox) Dispatched(ctx context.Context, leases []outbox.Lease, _, retainUntil time.Time) error {
	const update = "SET #state = :dispatched, #exp = :exp REMOVE #psk, #pq"
	names := map[string]string{"#exp": attrExpires, "#psk": oPSK, "#pq": oPQ}
	values := map[string]types.AttributeValue{":dispatched": str(string(outbox.Dispatched)), ":exp": num(ceilUnix(retainUntil))}
	markOne := func(l outbox.Lease, maybeDone bool) error {
		return o.markAgain(ctx, "dispatched", storeinstr.OpOutboxDispatched, l, update, names, values,
			func(it map[string]types.AttributeValue) bool {
				return itemS(it, oState) == string(outbox.Dispatched) && itemS(it, oOwner) == l.Owner && itemN(it, oVersion) == l.Version
			}, maybeDone)
	}
	errs := make([]error, len(leases))
	var chunks [][]int // indexes into leases of each transaction's entries
	var chunk []int
	var one []int // leases marked alone: unknown here (lost), or a transaction of one
	for i, l := range leases {
		if _, ok := o.itemOf(l); !ok {
			one = append(one, i)
			continue
		}
		chunk = append(chunk, i)
		if len(chunk) == maxTransactItems {
			chunks, chunk = append(chunks, chunk), nil
		}
	}
	if len(chunk) == 1 {
		one = append(one, chunk[0])
	} else if len(chunk) > 1 {
		chunks = append(chunks, chunk)
	}
	parallel(len(chunks)+len(one), func(n int) {
		if n >= len(chunks) {
			i := one[n-len(chunks)]
			errs[i] = markOne(leases[i], false)
			return
		}
		c := chunks[n]
		items := make([]types.TransactWriteItem, 0, len(c))
		for _, i := range c {
			key, _ := o.itemOf(leases[i])
			items = append(items, types.TransactWriteItem{Update: o.markUpdate(key, leases[i], update, names, values)})
		}
		// The SDK gives the call an idempotency token: a retry of a
		// transaction that committed unseen succeeds again.
		in := &ddb.TransactWriteItemsInput{TransactItems: items}
		err := o.s.do(ctx, storeinstr.OpOutboxDispatched, func(ctx context.Context, _ int) (middleware.Metadata, error) {
			out, err := o.client().TransactWriteItems(ctx, in)
			return metadata(out), err
		})
		if err == nil {
			for _, i := range c {
				o.done(leases[i].ID)
			}
			return
		}
		// One by one, each checked against the item as it is: the
		// transaction may have been written unseen.
		for _, i := range c {
			errs[i] = markOne(leases[i], true)
		}
	})
	return errors.Join(errs...)
}

// Retry implements outbox.Store: the entry is leased again from retryAt,
// on a new version with no owner, so that the lease given back fences
// nothing.
func (o *Outbox) Retry(ctx context.Context, l outbox.Lease, reason string, _, retryAt time.Time) error {
	return o.giveBack(ctx, "retry", storeinstr.OpOutboxRetry, oAttempts, l, reason, retryAt)
}

// Release implements outbox.Store as Retry does, counting a release
// rather than an attempt.
func (o *Outbox) Release(ctx context.Context, l outbox.Lease, reason string, _, retryAt time.Time) error {
	return o.giveBack(ctx, "release", storeinstr.OpOutboxRelease, oReleases, l, reason, retryAt)
}

// giveBack is Retry or Release: it adds one to the counter count.
func (o *Outbox) giveBack(ctx context.Context, op, instrOp, count string, l outbox.Lease, reason string, retryAt time.Time) error {
	return o.mark(ctx, op, instrOp, l, "SET #owner = :none, #version = :v1, #lease = :at, #err = :err ADD #count :one",
		map[string]string{"#lease": oLease, "#err": oError, "#count": count},
		map[string]types.AttributeValue{":none": str(""), ":v1": num(l.Version + 1), ":at": num(retryAt.UnixMilli()),
			":err": str(dedup.StorableReason(reason)), ":one": num(1)},
		func(it map[string]types.AttributeValue) bool {
			return itemS(it, oState) == string(outbox.Pending) && itemS(it, oOwner) == "" && itemN(it, oVersion) == l.Version+1
		})
}

// Dead implements outbox.Store.
func (o *Outbox) Dead(ctx context.Context, l outbox.Lease, reason string, _, retainUntil time.Time) error {
	return o.mark(ctx, "dead", storeinstr.OpOutboxDead, l, "SET #state = :dead, #exp = :exp, #err = :err REMOVE #psk, #pq",
		map[string]string{"#exp": attrExpires, "#psk": oPSK, "#pq": oPQ, "#err": oError},
		map[string]types.AttributeValue{":dead": str(string(outbox.Dead)), ":exp": num(ceilUnix(retainUntil)), ":err": str(dedup.StorableReason(reason))},
		func(it map[string]types.AttributeValue) bool {
			return itemS(it, oState) == string(outbox.Dead) && itemS(it, oOwner) == l.Owner && itemN(it, oVersion) == l.Version
		})
}

// Entries implements outbox.Store: a scan of the table, for operators and
// tests, in Seq order; limit <= 0 lists all. It reads the whole table
// whatever limit is: EntriesPage reads it a page at a time.
func (o *Outbox) Entries(ctx context.Context, state outbox.State, limit int) ([]outbox.Entry, error) {
	in := entriesScan(o.table, state)
	var out []outbox.Entry
	for {
		es, last, err := o.scanEntries(ctx, in)
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
		if len(last) == 0 {
			break
		}
		in.ExclusiveStartKey = last
	}
	slices.SortFunc(out, func(a, b outbox.Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

var _ outbox.Pager = (*Outbox)(nil)

// EntriesPage implements outbox.Pager: one Scan request of the table,
// from the item after the cursor's (the scan's LastEvaluatedKey), of at
// most limit items (limit <= 0: DynamoDB's page, up to 1 MB), those in
// state among them.
func (o *Outbox) EntriesPage(ctx context.Context, state outbox.State, cursor string, limit int) ([]outbox.Entry, string, error) {
	in := entriesScan(o.table, state)
	if limit > 0 {
		in.Limit = aws.Int32(int32(min(limit, math.MaxInt32)))
	}
	if cursor != "" {
		k, err := cursorKey(cursor)
		if err != nil {
			return nil, "", fmt.Errorf("dynamostore: outbox entries on table %s: %w", aws.ToString(o.table), err)
		}
		in.ExclusiveStartKey = k
	}
	es, last, err := o.scanEntries(ctx, in)
	if err != nil {
		return nil, "", err
	}
	next, err := keyCursor(last)
	if err != nil {
		return nil, "", fmt.Errorf("dynamostore: outbox entries on table %s: %w", aws.ToString(o.table), err)
	}
	return es, next, nil
}

// entriesScan is the scan of table's entries in state (all when "").
func entriesScan(table *string, state outbox.State) *ddb.ScanInput {
	in := &ddb.ScanInput{TableName: table, ConsistentRead: aws.Bool(true)}
	if state != "" {
		in.FilterExpression = aws.String("#state = :state")
		in.ExpressionAttributeNames = map[string]string{"#state": oState}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":state": str(string(state))}
	}
	return in
}

// scanEntries sends one Scan request and returns its entries (a lane's
// counter is none) and its LastEvaluatedKey.
func (o *Outbox) scanEntries(ctx context.Context, in *ddb.ScanInput) ([]outbox.Entry, map[string]types.AttributeValue, error) {
	var page *ddb.ScanOutput
	err := o.s.do(ctx, storeinstr.OpOutboxEntries, func(ctx context.Context, _ int) (middleware.Metadata, error) {
		var err error
		page, err = o.client().Scan(ctx, in)
		if page == nil {
			return middleware.Metadata{}, err
		}
		return page.ResultMetadata, err
	})
	if err != nil {
		return nil, nil, o.wrap("entries", err)
	}
	out := make([]outbox.Entry, 0, len(page.Items))
	for _, it := range page.Items {
		if itemS(it, oSK) == laneCounterSK {
			continue
		}
		e, err := decodeEntry(it)
		if err != nil {
			return nil, nil, o.wrap("entries", err)
		}
		out = append(out, e)
	}
	return out, page.LastEvaluatedKey, nil
}

// keyCursor is EntriesPage's cursor of a scan's LastEvaluatedKey ("" for
// none): the item's pk and sk, each in base64, joined by a dot.
func keyCursor(k map[string]types.AttributeValue) (string, error) {
	if len(k) == 0 {
		return "", nil
	}
	pk, okP := k[oPK].(*types.AttributeValueMemberS)
	sk, okS := k[oSK].(*types.AttributeValueMemberS)
	if !okP || !okS || len(k) != 2 {
		return "", fmt.Errorf("the scan's last key is not an item's %s and %s (%d attributes)", oPK, oSK, len(k))
	}
	return base64.RawURLEncoding.EncodeToString([]byte(pk.Value)) + "." + base64.RawURLEncoding.EncodeToString([]byte(sk.Value)), nil
}

// cursorKey is the LastEvaluatedKey of a cursor keyCursor made. The error
// does not quote the cursor: it holds an entry's lane, which may hold
// its key.
func cursorKey(c string) (map[string]types.AttributeValue, error) {
	p, q, ok := strings.Cut(c, ".")
	pk, errP := base64.RawURLEncoding.DecodeString(p)
	sk, errQ := base64.RawURLEncoding.DecodeString(q)
	if !ok || errP != nil || errQ != nil || len(pk) == 0 || len(sk) == 0 {
		return nil, outbox.ErrBadCursor
	}
	return map[string]types.AttributeValue{oPK: str(string(pk)), oSK: str(string(sk))}, nil
}

// Check verifies that the outbox table exists with its keys and indexes.
func (o *Outbox) Check(ctx context.Context) error {
	var desc *ddb.DescribeTableOutput
	err := o.s.do(ctx, "DescribeTable", func(ctx context.Context, _ int) (middleware.Metadata, error) {
		var err error
		desc, err = o.client().DescribeTable(ctx, &ddb.DescribeTableInput{TableName: o.table})
		return metadata(desc), err
	})
	if err != nil {
		return o.wrap("check", err)
	}
	if err := checkOutboxSchema(desc.Table); err != nil {
		return o.wrap("check", &LayoutError{Err: err})
	}
	return nil
}

func itemS(it map[string]types.AttributeValue, name string) string {
	if v, ok := it[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func itemB(it map[string]types.AttributeValue, name string) []byte {
	if v, ok := it[name].(*types.AttributeValueMemberB); ok {
		return v.Value
	}
	return nil
}

func itemN(it map[string]types.AttributeValue, name string) int64 {
	if v, ok := it[name].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return -1
}

// decodeEntry reads an entry's item.
func decodeEntry(it map[string]types.AttributeValue) (outbox.Entry, error) {
	id := string(itemB(it, oID))
	e := outbox.Entry{
		Message: outbox.Message{Destination: string(itemB(it, oDest)), OrderingKey: string(itemB(it, oOKey)), Body: itemB(it, oBody)},
		ID:      id, State: outbox.State(itemS(it, oState)),
		Lease:    outbox.Lease{ID: id, Owner: itemS(it, oOwner), Version: itemN(it, oVersion)},
		Attempts: int(itemN(it, oAttempts)), LastError: itemS(it, oError),
		CreatedAt: time.UnixMilli(itemN(it, oCreated)),
	}
	if _, ok := it[oReleases]; ok {
		e.Releases = int(itemN(it, oReleases))
	}
	seq, _, _ := strings.Cut(itemS(it, oSK), "#")
	e.Seq, _ = strconv.ParseInt(seq, 10, 64)
	switch e.State {
	case outbox.Pending:
		if ms := itemN(it, oLease); ms > 0 {
			e.ExpiresAt = time.UnixMilli(ms)
		}
	case outbox.Dispatched, outbox.Dead:
		e.ExpiresAt = time.Unix(itemN(it, attrExpires), 0)
	default:
		return outbox.Entry{}, fmt.Errorf("dynamostore: outbox entry %s: state %q", dedup.KeyHash(id), e.State)
	}
	var err error
	if e.Headers, err = outboxcodec.Decode(itemB(it, oHeaders)); err != nil {
		return outbox.Entry{}, fmt.Errorf("dynamostore: outbox entry %s: %w", dedup.KeyHash(id), err)
	}
	if e.Lease.Version < 0 || e.Attempts < 0 || e.Releases < 0 {
		return outbox.Entry{}, fmt.Errorf("dynamostore: outbox entry %s: a number missing", dedup.KeyHash(id))
	}
	return e, nil
}

// recordEstimate is the most a record of key with response takes in a
// transaction, for the transaction's size limit.
func recordEstimate(key map[string]types.AttributeValue, response []byte) int {
	return fixedRecordSize + 2*maxIdentifierLen + itemSize(key) + len(attrResponse) + len(response)
}

// maxIdentifierLen bounds an owner token or payload hash, for the
// estimate.
const maxIdentifierLen = 128

var _ outbox.Requeuer = (*Outbox)(nil)

// Requeue implements outbox.Requeuer: one conditional UpdateItem, which
// puts the entry back in both pending indexes and takes off the expiry
// its Dead mark set.
func (o *Outbox) Requeue(ctx context.Context, e outbox.Entry, reason string, now time.Time) error {
	lane := laneKey(e.ID, e.Message)
	sk := sortKey(e.Seq, e.ID)
	in := &ddb.UpdateItemInput{
		TableName: o.table, Key: map[string]types.AttributeValue{oPK: str(lane), oSK: str(sk)},
		UpdateExpression: aws.String("SET #state = :pending, #owner = :none, #version = :v1, #lease = :at, #err = :err, " +
			"#attempts = :zero, #releases = :zero, #psk = :sk, #pq = :pq REMOVE #exp"),
		ConditionExpression: aws.String("#state = :dead AND #version = :v"),
		ExpressionAttributeNames: map[string]string{"#state": oState, "#owner": oOwner, "#version": oVersion, "#lease": oLease,
			"#err": oError, "#attempts": oAttempts, "#releases": oReleases, "#psk": oPSK, "#pq": oPQ, "#exp": attrExpires},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pending": str(string(outbox.Pending)), ":none": str(""),
			":v1": num(e.Lease.Version + 1), ":at": num(now.UnixMilli()), ":err": str(dedup.StorableReason(reason)), ":zero": num(0),
			":sk": str(sk), ":pq": str(pendingShard(lane)), ":dead": str(string(outbox.Dead)), ":v": num(e.Lease.Version)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	retried := false
	err := o.s.do(ctx, storeinstr.OpOutboxRequeue, func(ctx context.Context, attempt int) (middleware.Metadata, error) {
		retried = attempt > 1
		out, err := o.client().UpdateItem(ctx, in)
		return metadata(out), err
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ccf):
		it := ccf.Item
		if retried && itemS(it, oState) == string(outbox.Pending) && itemS(it, oOwner) == "" && itemN(it, oVersion) == e.Lease.Version+1 {
			return nil
		}
		return fmt.Errorf("dynamostore: outbox requeue on table %s: %w: entry %s version %d", aws.ToString(o.table), outbox.ErrEntryChanged,
			dedup.KeyHash(e.ID), e.Lease.Version)
	}
	return o.wrap("requeue", err)
}
