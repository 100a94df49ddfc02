package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/internal/configerr"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/internal/awscreds"
	"github.com/onceq/onceq/internal/plainbody"
	"github.com/onceq/onceq/retry"
)

// Store is a dedup.Store, with ClaimComplete, over one DynamoDB table.
// It is safe for concurrent use.
type Store struct {
	clients []*ddb.Client
	table   string
	// tableName is table for the requests made per call, allocated once.
	tableName *string
	parts     *parts
	layout    layout
	// instr are the retries, metrics, hooks, logger and spans every store
	// has; hooks are the DynamoDB ones of its own.
	instr *storeinstr.Instruments
	hooks hooks
	log   *slog.Logger
	tel   *telemetry
	clock *clockOffset
	// clockCheck refuses claims whose Now is off DynamoDB's clock by more
	// than their SkewMargin.
	clockCheck bool
	// archive is the tombstone table claims consult (WithArchive), or nil.
	archive *string
	// tenantKeyed: TenantLayout, whose keys carry the message's tenant.
	tenantKeyed bool
	// maxResponse bounds a stored response (MaxResponseSize).
	maxResponse int
	// outbox is the relay's view of the outbox table (Outbox).
	outbox *Outbox
	// outboxSeq is the last Seq base given, in Unix microseconds.
	outboxSeq atomic.Int64
}

var _ dedup.Store = (*Store)(nil)

// ErrInvalidConfig wraps every configuration error New returns. It is the
// ErrInvalidConfig of every onceq package: errors.Is with any of them
// matches.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// New returns a Store over the table of WithTable (dedup.DefaultTable when
// none), which CreateTable can make (with the same layout option). client
// may be nil only when WithRegionalClients is given. Errors wrap
// ErrInvalidConfig.
func New(client *ddb.Client, opts ...Option) (*Store, error) {
	cfg := config{policy: retry.DefaultPolicy(), table: dedup.DefaultTable}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	table := cfg.table
	switch {
	case table == "":
		return nil, fmt.Errorf("dynamostore: %w: WithTable(\"\"): no table name", ErrInvalidConfig)
	case client == nil && len(cfg.regional) == 0:
		return nil, fmt.Errorf("dynamostore: %w: no client", ErrInvalidConfig)
	case slices.Contains(cfg.regional, nil):
		return nil, fmt.Errorf("dynamostore: %w: a nil regional client", ErrInvalidConfig)
	case cfg.shards < 0 || cfg.shards > 1000:
		return nil, fmt.Errorf("dynamostore: %w: TenantShards(%d): want 1 to 1000", ErrInvalidConfig, cfg.shards)
	case cfg.shards > 1 && !cfg.fromMessage:
		return nil, fmt.Errorf("dynamostore: %w: TenantShards without TenantLayout", ErrInvalidConfig)
	case cfg.maxResponse > maxItemSize:
		return nil, fmt.Errorf("dynamostore: %w: MaxResponseSize(%d): a DynamoDB item holds at most %d bytes", ErrInvalidConfig, cfg.maxResponse, maxItemSize)
	}
	if cfg.maxResponse <= 0 {
		cfg.maxResponse = dedup.DefaultMaxResponseSize
	}
	var hs hooks
	clients := []*ddb.Client{ownClient(client)}
	if len(cfg.regional) > 0 {
		clients = make([]*ddb.Client, len(cfg.regional))
		for i, c := range cfg.regional {
			clients[i] = ownClient(c)
		}
	}
	instr, err := storeinstr.New(storeinstr.SystemDynamoDB, "dynamostore", errorCode, storeinstr.Config{
		Policy: cfg.policy, Hooks: cfg.hooks, Own: hs.sorters(), Logger: cfg.logger, MeterProvider: cfg.meter, TracerProvider: cfg.tracer,
	})
	if err != nil {
		return nil, err
	}
	clock := &clockOffset{}
	tel, err := newTelemetry(cfg.meter, clock)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: %w: metrics: %w", ErrInvalidConfig, err)
	}
	var archive *string
	if cfg.archive != "" {
		archive = aws.String(cfg.archive)
	}
	s := &Store{
		archive:     archive,
		clients:     clients,
		table:       table,
		tableName:   aws.String(table),
		parts:       newParts(layout{tenant: cfg.tenant}),
		layout:      layout{tenant: cfg.tenant, shards: cfg.shards},
		tenantKeyed: cfg.fromMessage,
		maxResponse: cfg.maxResponse,
		instr:       instr,
		hooks:       hs,
		log:         instr.Logger(),
		tel:         tel,
		clock:       clock,

		clockCheck: !cfg.noClockCheck,
	}
	s.outbox = &Outbox{s: s, table: aws.String(OutboxTable(table))}
	return s, nil
}

// Table is the table name.
func (s *Store) Table() string { return s.table }

// client is the key's home client: a stable hash keeps every call for one
// key in one region.
func (s *Store) client(key string) *ddb.Client { return s.clients[s.HomeRegion(key)] }

// HomeRegion is the index, in WithRegionalClients' list, of the region
// every call for key goes to (0 without regional clients): a stable hash
// of the key over the list's length, so a new list re-homes keys.
func (s *Store) HomeRegion(key string) int {
	if len(s.clients) == 1 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum64() % uint64(len(s.clients)))
}

// ownClient is the store's copy of a caller's client, made once here
// rather than by a per-call option (which would copy the client's options
// and build its middleware stack again on every request):
//   - one HTTP attempt per SDK call: retry.Policy retries, so that every
//     throttle reaches the hooks and the retry observers (Attach);
//   - request bodies without WriteTo, against a race of smithy-go and
//     net/http that fails a call the server answered (see
//     internal/plainbody).
func ownClient(c *ddb.Client) *ddb.Client {
	if c == nil {
		return nil
	}
	return ddb.New(c.Options(), func(o *ddb.Options) {
		o.Retryer = aws.NopRetryer{}
		o.HTTPClient = plainbody.Client(o.HTTPClient)
	})
}

// do runs call under the store's instruments (retry policy, metrics,
// hooks, logger, spans: see package storeinstr); call learns its attempt
// number (1 first) so it can tell a retry, after which an earlier attempt
// may have committed unseen, from a first try.
//
// Every response, and every error that carries one, is a sample of
// DynamoDB's clock (its Date header), which claims are checked against.
func (s *Store) do(ctx context.Context, op string, call func(ctx context.Context, attempt int) (middleware.Metadata, error)) error {
	return s.instr.Do(ctx, storeOp(op), func(ctx context.Context, attempt int) error {
		start := time.Now()
		md, err := call(ctx, attempt)
		err = awscreds.Explain(err) // not retried, and said plainly
		s.clock.observe(start, time.Now(), md, err)
		return err
	})
}

// storeOp is op's name in the instruments: the store operations'
// (storeinstr.OpClaim, ...), and check for the requests of Check.
func storeOp(op string) string {
	switch op {
	case "Claim":
		return storeinstr.OpClaim
	case "ClaimComplete":
		return storeinstr.OpClaimComplete
	case "Complete":
		return storeinstr.OpComplete
	case "Fail":
		return storeinstr.OpFail
	case "Extend":
		return storeinstr.OpExtend
	case "Get":
		return storeinstr.OpGet
	case "Reset":
		return storeinstr.OpReset
	case "DescribeTable", "DescribeTimeToLive", "GetItem", "PutItem":
		return storeinstr.OpCheck
	case "Query":
		return "tenant_records"
	case "FindKeyHash":
		return "find_key_hash"
	case "List":
		return "list"
	case "Forget":
		return "forget"
	}
	return op
}

// claimNow is :now of a claim condition: floored, minus the request's
// skew margin (a negative margin counts as none).
func claimNow(now time.Time, margin time.Duration) int64 { return floorUnix(now.Add(-max(margin, 0))) }

// metadata is a call's result metadata, where the raw response is kept.
func metadata[O interface {
	*ddb.PutItemOutput | *ddb.UpdateItemOutput | *ddb.GetItemOutput | *ddb.TransactWriteItemsOutput |
		*ddb.DescribeTableOutput | *ddb.DescribeTimeToLiveOutput | *ddb.DeleteItemOutput
}](o O) middleware.Metadata {
	switch o := any(o).(type) {
	case *ddb.PutItemOutput:
		if o != nil {
			return o.ResultMetadata
		}
	case *ddb.UpdateItemOutput:
		if o != nil {
			return o.ResultMetadata
		}
	case *ddb.GetItemOutput:
		if o != nil {
			return o.ResultMetadata
		}
	case *ddb.TransactWriteItemsOutput:
		if o != nil {
			return o.ResultMetadata
		}
	case *ddb.DescribeTableOutput:
		if o != nil {
			return o.ResultMetadata
		}
	case *ddb.DescribeTimeToLiveOutput:
		if o != nil {
			return o.ResultMetadata
		}
	case *ddb.DeleteItemOutput:
		if o != nil {
			return o.ResultMetadata
		}
	}
	return middleware.Metadata{}
}

// checkClock refuses a claim whose Now is surely further from DynamoDB's
// clock (local time plus the measured offset; local time until a response
// has been seen) than its margin, and logs once when the offset alone
// surely passes half the margin. "Surely": beyond the measurement's own
// uncertainty (Date has one-second resolution), so a small margin does not
// refuse a good clock, and by more than clockSlack. A zero margin is
// checked too: it says the clocks agree, so a clock surely off is refused.
func (s *Store) checkClock(ctx context.Context, now time.Time, margin time.Duration) error {
	margin = max(margin, 0)
	off, _ := s.clock.offset()
	if above, changed := s.clock.crossed(margin); changed && above {
		s.log.WarnContext(ctx, "dynamostore: the local clock is off DynamoDB's by more than half the skew margin",
			"offset", off, "skew_margin", margin)
	} else if changed {
		s.log.InfoContext(ctx, "dynamostore: the local clock is back within half the skew margin of DynamoDB's",
			"offset", off, "skew_margin", margin)
	}
	if !s.clockCheck {
		return nil
	}
	if skew := now.Sub(time.Now().Add(off)); abs(skew)-s.clock.uncertainty() > margin+clockSlack {
		return &ClockSkewError{Skew: skew, Margin: margin}
	}
	return nil
}

// clockSlack is how stale a claim's Now may be, read by the caller a
// moment before the call, and still not be taken for a clock off: without
// it a zero margin would refuse a right clock. A busy worker can take
// several hundred milliseconds between reading Now and the call (seen at
// a load of six per core), and a refusal stops the worker, so the slack
// is a second: a clock seconds off is still refused.
const clockSlack = time.Second

// decision marks an error a condition decided; the caller handles it.
type decision struct{ err error }

func (d *decision) Error() string           { return d.err.Error() }
func (d *decision) Unwrap() error           { return d.err }
func (d *decision) RetryClass() retry.Class { return retry.ConditionFailed }

func checkClaim(key, owner string, now time.Time) error {
	switch {
	case key == "":
		return dedup.ErrEmptyKey
	case owner == "":
		return errors.New("dynamostore: claim without an owner token")
	case now.IsZero():
		return errors.New("dynamostore: claim without Now")
	}
	return nil
}

func checkLease(l dedup.Lease) error {
	if l.Key == "" {
		return dedup.ErrEmptyKey
	}
	if l.Owner == "" || l.Version <= 0 {
		return fmt.Errorf("dynamostore: invalid lease (owner %q, version %d)", l.Owner, l.Version)
	}
	return nil
}

// Claim takes the key when it is absent or expired (see the package
// documentation). Key reuse is not judged here: the Claim's Existing
// carries the live record's PayloadHash for the caller to compare.
func (s *Store) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	const op = "Claim"
	if err := checkClaim(req.Key, req.Owner, req.Now); err != nil {
		return dedup.Claim{}, err
	}
	if !req.LeaseUntil.After(req.Now) {
		return dedup.Claim{}, fmt.Errorf("%w (LeaseUntil %v, Now %v)", ErrNoLeaseExpiry, req.LeaseUntil, req.Now)
	}
	if err := s.checkClock(ctx, req.Now, req.SkewMargin); err != nil {
		return dedup.Claim{}, err
	}
	key, err := s.layout.key(req.Key)
	if err != nil {
		return dedup.Claim{}, err
	}
	if err := checkSize(key, req.Owner, req.PayloadHash, nil, ""); err != nil {
		return dedup.Claim{}, err
	}
	return s.claim(ctx, op, claimArgs{
		key: req.Key, item: key, owner: req.Owner, payloadHash: req.PayloadHash, now: req.Now, margin: req.SkewMargin,
		status: dedup.StatusPending, expires: ceilUnix(req.LeaseUntil),
	})
}

// claimArgs is what Claim and ClaimComplete write: the record's status,
// expiry and (COMPLETED) response, for a key whose primary key is item.
type claimArgs struct {
	key, owner, payloadHash string
	item                    map[string]types.AttributeValue
	now                     time.Time
	margin                  time.Duration
	status                  dedup.Status
	expires                 int64
	response                []byte
}

// newRecord is a claim of an absent key: the whole record at version 1,
// no failed run counted: a.item (the primary key) and the attributes.
func (p *parts) newRecord(a claimArgs) map[string]types.AttributeValue {
	item := make(map[string]types.AttributeValue, len(a.item)+9)
	for k, v := range a.item {
		item[k] = v
	}
	exp := num(a.expires)
	item[attrStatus] = p.status(a.status)
	item[attrVersion] = p.one
	item[attrAttempts] = p.zero
	item[attrOwner] = str(a.owner)
	item[attrPayload] = str(a.payloadHash)
	item[attrCreated] = num(floorUnix(a.now))
	item[attrExpires] = exp
	switch {
	case a.status == dedup.StatusPending:
		item[attrLease] = exp
	case len(a.response) > 0:
		item[attrResponse] = &types.AttributeValueMemberB{Value: a.response}
	}
	return item
}

// claim takes a key in one PutItem when it is absent, which nearly every
// key is, and only when that meets an expired record falls back to the
// UpdateItem of claimRequest, which keeps version and attempts counting
// across the takeover. The Put's condition failure returns the record
// (ALL_OLD): a live one is the lost claim's Existing, or on a retry our
// own earlier attempt, as the Update's would be, at no extra call.
func (s *Store) claim(ctx context.Context, op string, a claimArgs) (dedup.Claim, error) {
	client := s.client(a.key)
	in := &ddb.PutItemInput{
		TableName:                           s.tableName,
		Item:                                s.parts.newRecord(a),
		ConditionExpression:                 s.parts.absent,
		ExpressionAttributeNames:            s.parts.absentNames,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	retried := false
	err := s.do(ctx, op, func(ctx context.Context, attempt int) (middleware.Metadata, error) {
		retried = attempt > 1
		o, err := client.PutItem(ctx, in)
		return metadata(o), err
	})
	// Only a PENDING claim consults the archive here: ClaimComplete does
	// before it writes (archiveClaimComplete).
	checkArchive := s.archive != nil && a.status == dedup.StatusPending
	if err == nil {
		c := dedup.Claim{Acquired: true, Lease: dedup.Lease{Key: a.key, Owner: a.owner, Version: 1}, Attempt: 1}
		if checkArchive {
			return s.fromArchive(ctx, c, a, nil)
		}
		return c, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return dedup.Claim{}, s.wrap(op, a.key, s.refused(ctx, op, a.key, in, err))
	}
	// The Update is conditioned on the version it saw, since what it
	// writes depends on that record; a record that moved on between is
	// looked at again, a few times at most.
	seen := ccf.Item
	for range maxTakeoverTries {
		if holds(seen, a.now, a.margin) || (retried && ownedBy(seen, a.owner)) || badVersion(seen) {
			c, err := s.lost(a.key, a.owner, a.status, seen, retried)
			if err == nil && c.Acquired && checkArchive {
				// Our own earlier attempt, whose answer was lost.
				return s.fromArchive(ctx, c, a, nil)
			}
			return c, err
		}
		r := s.claimRequest(a.owner, a.payloadHash, a.now, a.margin, a.status, a.expires, a.response, seen)
		c, failed, err := s.claimItem(ctx, op, a.key, a.owner, r.updateItem(s.tableName, a.item, types.ReturnValueAllOld))
		if err != nil || failed == nil {
			if err == nil && c.Acquired && checkArchive {
				return s.fromArchive(ctx, c, a, c.Previous)
			}
			return c, err
		}
		seen, retried = failed.item, failed.retried
	}
	return s.lost(a.key, a.owner, a.status, seen, retried)
}

// ownedBy reports whether item was written by the claim of owner: after a
// retried call, our own earlier try, committed with its answer lost.
func ownedBy(item map[string]types.AttributeValue, owner string) bool {
	o, err := getS(item, attrOwner, true)
	return err == nil && o == owner
}

// badVersion reports whether item has a version that is not one: a
// takeover could not count on from it (DynamoDB refuses the arithmetic),
// so the claim reports the corrupt record instead.
func badVersion(item map[string]types.AttributeValue) bool {
	_, has := item[attrVersion]
	_, err := getN(item, attrVersion, true, 0, 1<<62)
	return has && err != nil
}

// maxTakeoverTries bounds the Updates of one claim whose expired record
// keeps moving on under it.
const maxTakeoverTries = 3

// holds reports whether old, the record a claim's Put met, surely holds
// the key against the claim: claimRequest's condition is false on it, so
// its Update would fail too. An item it cannot read (no expiry, a
// mistyped attribute) does not surely hold the key: the Update decides.
func holds(old map[string]types.AttributeValue, now time.Time, margin time.Duration) bool {
	exp, err := getN(old, attrExpires, true, 0, maxEpoch)
	if err != nil {
		return false
	}
	if margin <= 0 {
		return exp >= floorUnix(now)
	}
	if exp < claimNow(now, margin) {
		return false
	}
	status, err := getS(old, attrStatus, true)
	if err != nil {
		return false
	}
	return exp >= floorUnix(now) || status == string(dedup.StatusPending)
}

// claimRequest is the conditional update that takes a key when it is
// absent or expired, shared by Claim (PENDING, with a lease until expires)
// and ClaimComplete (COMPLETED with its response, retained until expires),
// sent once a claim's Put met an expired record, seen. The version counts
// on across takeovers (if_not_exists(x, 0) + 1); the failed runs seen
// counted are kept, except past a COMPLETED record's retention (a new
// message: none). Those depend on the record seen, so the update holds
// only while its version is the one seen, or while it still has none when
// seen had none (a record written by hand, an older schema). With seen
// unknown (nil: a cancellation that did not return it) the record's own
// count is kept, whatever its status.
//
// Every branch writes a condition DynamoDB accepts, which refuses
// redundant parentheses: no group encloses a single term or another
// group alone.
func (s *Store) claimRequest(owner, payloadHash string, now time.Time, margin time.Duration, status dedup.Status, expires int64, response []byte, seen map[string]types.AttributeValue) *request {
	r := newRequest()
	zero, one := r.value(":zero", num(0)), r.value(":one", num(1))
	exp := r.value(":exp", num(expires))
	r.Set(nStatus, r.value(":status", str(string(status))))
	r.Set(nVersion, "if_not_exists(", nVersion, ", ", zero, ") + ", one)
	seenVersion, verr := getN(seen, attrVersion, true, 1, 1<<62)
	_, hasVersion := seen[attrVersion]
	fenced := verr == nil || (seen != nil && !hasVersion)
	if fenced {
		r.Set(nAttempts, r.value(":att", num(keptAttempts(seen))))
		if tk := keptTakeovers(seen); tk > 0 {
			r.Set(nTakeover, r.value(":tk", num(tk)))
		} else {
			r.Remove(nTakeover)
		}
	} else {
		r.Set(nAttempts, "if_not_exists(", nAttempts, ", ", zero, ")")
	}
	r.Set(nOwner, r.value(":owner", str(owner)))
	r.Set(nPayload, r.value(":ph", str(payloadHash)))
	r.Set(nCreated, r.value(":created", num(floorUnix(now))))
	r.Set(nExpires, exp)
	switch {
	case status == dedup.StatusPending:
		r.Set(nLease, exp)
		r.Remove(nResponse, nError)
	case len(response) > 0:
		r.Set(nResponse, r.value(":resp", &types.AttributeValueMemberB{Value: response}))
		r.Remove(nLease, nError)
	default:
		r.Remove(nLease, nError, nResponse)
	}
	// absent OR [ (version arm AND ] expired [ ) ]
	s.layout.notExists(r)
	r.Where(" OR ")
	switch {
	case verr == nil:
		r.Where("(", r.name(nVersion), " = ", r.value(":seenv", num(seenVersion)), " AND ")
	case fenced:
		r.Where("(attribute_not_exists(", r.name(nVersion), ") AND ")
	}
	nowArm := r.value(":now", num(floorUnix(now)))
	if margin <= 0 {
		r.Where(r.name(nExpires), " < ", nowArm)
	} else {
		// The margin protects leases only: a lease is taken over once
		// expired for longer than the margin; a retry delay or a retention
		// ends on time. Grouped only as an AND's operand.
		if fenced {
			r.Where("(")
		}
		r.Where(r.name(nExpires), " < ", r.value(":nowm", num(claimNow(now, margin))),
			" OR (", r.name(nExpires), " < ", nowArm, " AND ", r.name(nStatus), " <> ", r.value(":pending", str(string(dedup.StatusPending))), ")")
		if fenced {
			r.Where(")")
		}
	}
	if fenced {
		r.Where(")")
	}
	return r
}

// keptTakeovers is the takeovers a claim over old counts: old's, and one
// more when old is an abandoned lease (PENDING), none when old is
// COMPLETED (past its retention, the key is a new message). A record
// without the attribute counts none.
func keptTakeovers(old map[string]types.AttributeValue) int64 {
	st, _ := getS(old, attrStatus, true)
	if st == string(dedup.StatusCompleted) {
		return 0
	}
	t, _ := getN(old, attrTakeovers, false, 0, 1<<31-2)
	if st == string(dedup.StatusPending) {
		t++
	}
	return t
}

// keptAttempts is the failed runs a takeover of old keeps: old's, unless
// old is COMPLETED (past its retention, the key is a new message).
func keptAttempts(old map[string]types.AttributeValue) int64 {
	if st, err := getS(old, attrStatus, true); err == nil && st == string(dedup.StatusCompleted) {
		return 0
	}
	a, _ := getN(old, attrAttempts, false, 0, 1<<31-2)
	return a
}

// conditionFailed is the record a claim's failed condition returned, and
// whether the call had been retried.
type conditionFailed struct {
	item    map[string]types.AttributeValue
	retried bool
}

// claimItem makes a claim's UpdateItem and reads its outcome: won, or
// the record the condition failure returns, for the caller to judge.
func (s *Store) claimItem(ctx context.Context, op, key, owner string, in *ddb.UpdateItemInput) (dedup.Claim, *conditionFailed, error) {
	client := s.client(key)
	var out *ddb.UpdateItemOutput
	retried := false
	err := s.do(ctx, op, func(ctx context.Context, attempt int) (middleware.Metadata, error) {
		retried = attempt > 1
		o, err := client.UpdateItem(ctx, in)
		out = o
		return metadata(o), err
	})
	if err == nil {
		return s.acquired(ctx, op, key, owner, out.Attributes), nil, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return dedup.Claim{}, nil, s.wrap(op, key, s.refused(ctx, op, key, in, err))
	}
	return dedup.Claim{}, &conditionFailed{item: ccf.Item, retried: retried}, nil
}

// acquired builds a won Claim from the ALL_OLD attributes the claim
// replaced (empty when the key was absent), computing the new counters the
// way the update did.
func (s *Store) acquired(ctx context.Context, op, key, owner string, old map[string]types.AttributeValue) dedup.Claim {
	c := dedup.Claim{Acquired: true, Lease: dedup.Lease{Key: key, Owner: owner, Version: 1}, Attempt: 1}
	if len(old) == 0 {
		return c
	}
	v, _ := getN(old, attrVersion, false, 0, 1<<62)
	c.Lease.Version, c.Attempt, c.Takeovers = v+1, int(keptAttempts(old))+1, int(keptTakeovers(old))
	s.hooks.onExpiredPresent(ctx, op)
	prev, err := decodeRecord(old)
	if err != nil {
		s.log.WarnContext(ctx, "dynamostore: claim replaced an undecodable record", "key_hash", dedup.KeyHash(key), "err", err)
		return c
	}
	c.Previous = &prev
	return c
}

// lost reads the record a failed claim condition returned. On a retry, a
// record holding our owner token in the state we were writing is our own
// earlier attempt, committed though its answer was lost: the claim is ours.
func (s *Store) lost(key, owner string, writing dedup.Status, item map[string]types.AttributeValue, retried bool) (dedup.Claim, error) {
	rec, err := decodeRecord(item)
	if err != nil {
		return dedup.Claim{}, fmt.Errorf("dynamostore: claim key_hash %s: key is held but its record is unreadable: %w", dedup.KeyHash(key), err)
	}
	if retried && rec.Owner == owner && rec.Status == writing {
		return dedup.Claim{Acquired: true, Lease: dedup.Lease{Key: key, Owner: owner, Version: rec.Version}, Attempt: rec.Attempts + 1,
			Takeovers: rec.Takeovers}, nil
	}
	return dedup.Claim{Existing: rec}, nil
}

// Complete marks the lease COMPLETED, with req.Writes in the same
// TransactWriteItems when there are any.
func (s *Store) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	_, err := againAboveLanes(s, func() (struct{}, error) { return struct{}{}, s.complete(ctx, req) })
	return err
}

// complete is one try of Complete.
func (s *Store) complete(ctx context.Context, req dedup.CompleteRequest) error {
	const op = "Complete"
	if err := checkLease(req.Lease); err != nil {
		return err
	}
	writes, err := transactItems(req.Writes)
	if err != nil {
		return err
	}
	key, err := s.layout.key(req.Lease.Key)
	if err != nil {
		return err
	}
	ob, err := s.outboxItems(req.Lease.Key, req.Outbox, req.Now, writes, recordEstimate(key, req.Response))
	if err != nil {
		return err
	}
	writes = append(writes, ob...)
	if err := s.checkResponse(key, req.Lease.Owner, "", req.Response); err != nil {
		return err
	}
	r := s.parts.complete[min(len(req.Response), 1)].with(s.parts.completeValues(req.Lease, req.ExpiresAt, req.Response))
	return s.fenced(ctx, op, req.Lease, dedup.StatusCompleted, req.Lease.Version+1, key, r, writes)
}

// completeRequest is Complete's fenced update, written by the request
// builder: what parts.complete is made of.
func completeRequest(l dedup.Lease, expires time.Time, response []byte) *request {
	r := settling(l, dedup.StatusCompleted, ":completed", expires)
	r.Remove(nLease, nError)
	if len(response) > 0 {
		r.Set(nResponse, r.value(":resp", &types.AttributeValueMemberB{Value: response}))
	} else {
		r.Remove(nResponse)
	}
	return r
}

// completeValues are the values of completeRequest.
func (p *parts) completeValues(l dedup.Lease, expires time.Time, response []byte) map[string]types.AttributeValue {
	v := make(map[string]types.AttributeValue, 7)
	v[":completed"] = p.completed
	v[":v1"] = num(l.Version + 1)
	v[":exp"] = num(ceilUnix(expires))
	v[":owner"] = str(l.Owner)
	v[":v"] = num(l.Version)
	v[":pending"] = p.pending
	if len(response) > 0 {
		v[":resp"] = &types.AttributeValueMemberB{Value: response}
	}
	return v
}

// Fail marks the lease FAILED until req.RetryAt.
func (s *Store) Fail(ctx context.Context, req dedup.FailRequest) error {
	const op = "Fail"
	key, err := s.leaseKey(req.Lease)
	if err != nil {
		return err
	}
	status, placeholder := dedup.StatusFailed, ":failed"
	if req.DeadLetter {
		status, placeholder = dedup.StatusDeadLetter, ":dead"
	}
	r := settling(req.Lease, status, placeholder, req.RetryAt)
	r.Set(nError, r.value(":err", str(dedup.StorableReason(req.Reason))))
	switch {
	case req.ResetAttempts:
		r.Set(nAttempts, r.value(":zero", num(0)))
		r.Remove(nTakeover)
	case !req.RefundAttempt:
		// The handler failed: one more failed run.
		r.Set(nAttempts, "if_not_exists(", nAttempts, ", ", r.value(":zero", num(0)), ") + ", r.value(":one", num(1)))
	}
	r.Remove(nLease, nResponse)
	return s.fenced(ctx, op, req.Lease, status, req.Lease.Version+1, key, r, nil)
}

// Extend pushes the lease to req.LeaseUntil, never back. The version is kept, so the
// caller's Lease stays valid; the owner and version still fence it.
func (s *Store) Extend(ctx context.Context, req dedup.ExtendRequest) error {
	const op = "Extend"
	key, err := s.leaseKey(req.Lease)
	if err != nil {
		return err
	}
	r := newRequest()
	lease := r.value(":lease", num(ceilUnix(req.LeaseUntil)))
	r.Set(nExpires, lease)
	r.Set(nLease, lease)
	r.fence(req.Lease.Owner, req.Lease.Version)
	// A lease only moves forward: a holder whose clock stepped back must
	// not shorten it, or another worker takes a live key.
	r.Where(" AND ", nExpires, " <= ", lease)
	// A retry re-applies the same idempotent update, so there is no earlier
	// attempt to recognise: done status PENDING with the same version.
	err = s.fenced(ctx, op, req.Lease, "", 0, key, r, nil)
	var lost *LeaseLostError
	if errors.As(err, &lost) && lost.Current != nil && lost.Current.Status == dedup.StatusPending &&
		lost.Current.Owner == req.Lease.Owner && lost.Current.Version == req.Lease.Version {
		// Still ours: only the expiry arm failed, the lease is already longer.
		return nil
	}
	return err
}

// leaseKey checks a held lease and returns its record's key.
func (s *Store) leaseKey(l dedup.Lease) (map[string]types.AttributeValue, error) {
	if err := checkLease(l); err != nil {
		return nil, err
	}
	return s.layout.key(l.Key)
}

// settling starts the fenced update that ends lease l in status, one
// version on, the record expiring at expires: what Complete and Fail both
// write before their own attributes.
func settling(l dedup.Lease, status dedup.Status, placeholder string, expires time.Time) *request {
	r := newRequest()
	r.Set(nStatus, r.value(placeholder, str(string(status))))
	r.Set(nVersion, r.value(":v1", num(l.Version+1)))
	r.Set(nExpires, r.value(":exp", num(ceilUnix(expires))))
	r.fence(l.Owner, l.Version)
	return r
}

// fenced runs a fenced update of the record, alone (UpdateItem) or with
// business writes (TransactWriteItems, the record first). done and
// doneVersion describe the record our update leaves, to recognise it on a
// retry ("" when the update is idempotent and needs no recognising).
func (s *Store) fenced(ctx context.Context, op string, l dedup.Lease, done dedup.Status, doneVersion int64, key map[string]types.AttributeValue, r *request, writes []types.TransactWriteItem) error {
	client := s.client(l.Key)
	retried := false
	var failedItem map[string]types.AttributeValue
	var err error
	if len(writes) == 0 {
		in := r.updateItem(s.tableName, key, types.ReturnValueNone)
		err = s.do(ctx, op, func(ctx context.Context, attempt int) (middleware.Metadata, error) {
			retried = attempt > 1
			o, err := client.UpdateItem(ctx, in)
			return metadata(o), err
		})
		var ccf *types.ConditionalCheckFailedException
		if err == nil {
			return nil
		}
		if !errors.As(err, &ccf) {
			return s.wrap(op, l.Key, s.refused(ctx, op, l.Key, in, err))
		}
		failedItem = ccf.Item
	} else {
		c, err := s.transact(ctx, op, client, r.transactItem(s.tableName, key), writes, &retried)
		switch {
		case err != nil:
			return s.wrap(op, l.Key, err)
		case c.ok:
			return nil
		case !c.recordFailed:
			return s.commitError(ctx, c, writes)
		}
		failedItem = c.record
	}
	var cur *dedup.Record
	if len(failedItem) > 0 {
		r, err := decodeRecord(failedItem)
		if err != nil {
			return fmt.Errorf("%w (record unreadable: %v)", &LeaseLostError{Op: op, Lease: l}, err)
		}
		cur = &r
	}
	if retried && done != "" && cur != nil && cur.Owner == l.Owner && cur.Status == done && cur.Version == doneVersion {
		// Our earlier attempt committed; its answer was lost.
		return nil
	}
	return &LeaseLostError{Op: op, Lease: l, Current: cur}
}

// transact sends one TransactWriteItems of record then writes, retried by
// the policy. With a nil error, either it committed (c.ok) or a condition
// decided: the record's (c.recordFailed) or a business write's (c.business).
func (s *Store) transact(ctx context.Context, op string, client *ddb.Client, record types.TransactWriteItem, writes []types.TransactWriteItem, retried *bool) (cancellation, error) {
	items := make([]types.TransactWriteItem, 0, 1+len(writes))
	items = append(items, record)
	items = append(items, writes...)
	in := &ddb.TransactWriteItemsInput{TransactItems: items}
	var c cancellation
	err := s.do(ctx, op, func(ctx context.Context, attempt int) (middleware.Metadata, error) {
		*retried = attempt > 1
		c = cancellation{business: -1}
		o, err := client.TransactWriteItems(ctx, in)
		md := metadata(o)
		var tce *types.TransactionCanceledException
		if err == nil || !errors.As(err, &tce) {
			return md, err
		}
		c, err = readCancellation(ctx, op, tce, &s.hooks, s.tel)
		if err != nil {
			return md, err
		}
		return md, &decision{err: tce}
	})
	var d *decision
	if errors.As(err, &d) {
		return c, nil
	}
	if err != nil {
		return c, s.nameMissingTable(ctx, client, items, err)
	}
	c.ok = true
	return c, nil
}

// nameMissingTable turns a transaction's ResourceNotFoundException, which
// does not say which table is missing, into a *TableNotFoundError naming
// it: each table of the transaction is described until one is not found.
func (s *Store) nameMissingTable(ctx context.Context, client *ddb.Client, items []types.TransactWriteItem, err error) error {
	var rnf *types.ResourceNotFoundException
	if !errors.As(err, &rnf) {
		return err
	}
	var names []string
	for _, it := range items {
		var t *string
		switch {
		case it.Put != nil:
			t = it.Put.TableName
		case it.Update != nil:
			t = it.Update.TableName
		case it.Delete != nil:
			t = it.Delete.TableName
		case it.ConditionCheck != nil:
			t = it.ConditionCheck.TableName
		}
		if name := aws.ToString(t); name != "" && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, name := range names {
		_, derr := client.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: aws.String(name)})
		if errors.As(derr, &rnf) {
			return &TableNotFoundError{Table: name, err: err}
		}
	}
	return fmt.Errorf("dynamostore: one of the tables %s does not exist: %w", strings.Join(names, ", "), err)
}

// ClaimComplete writes the record straight as COMPLETED, with req.Writes in
// the same TransactWriteItems, when the key is absent or expired. Without
// writes it is one PutItem (and an UpdateItem for a takeover) and the Claim
// is as complete as Claim's; with
// writes DynamoDB returns no values on success, so the Claim's
// Lease.Version is 0 (unknown); a takeover's Previous and Attempt are
// those of the record its first try met.
func (s *Store) ClaimComplete(ctx context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	return againAboveLanes(s, func() (dedup.Claim, error) { return s.claimComplete(ctx, req) })
}

// claimComplete is one try of ClaimComplete.
func (s *Store) claimComplete(ctx context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	const op = "ClaimComplete"
	if err := checkClaim(req.Key, req.Owner, req.Now); err != nil {
		return dedup.Claim{}, err
	}
	if err := s.checkClock(ctx, req.Now, req.SkewMargin); err != nil {
		return dedup.Claim{}, err
	}
	writes, err := transactItems(req.Writes)
	if err != nil {
		return dedup.Claim{}, err
	}
	key, err := s.layout.key(req.Key)
	if err != nil {
		return dedup.Claim{}, err
	}
	ob, err := s.outboxItems(req.Key, req.Outbox, req.Now, writes, recordEstimate(key, req.Response))
	if err != nil {
		return dedup.Claim{}, err
	}
	writes = append(writes, ob...)
	if err := s.checkResponse(key, req.Owner, req.PayloadHash, req.Response); err != nil {
		return dedup.Claim{}, err
	}
	a := claimArgs{
		key: req.Key, item: key, owner: req.Owner, payloadHash: req.PayloadHash, now: req.Now, margin: req.SkewMargin,
		status: dedup.StatusCompleted, expires: ceilUnix(req.ExpiresAt), response: req.Response,
	}
	if s.archive != nil {
		if c, found, err := s.archiveClaimComplete(ctx, a); err != nil || found {
			return c, err
		}
	}
	if len(writes) == 0 {
		return s.claim(ctx, op, a)
	}

	// As claim: a Put for an absent key, the Update only once the Put met
	// an expired record. A cancelled transaction applied none of its
	// writes, so sending them again with the Update applies them once.
	client := s.client(req.Key)
	retried := false
	put := types.TransactWriteItem{Put: &types.Put{
		TableName:                           s.tableName,
		Item:                                s.parts.newRecord(a),
		ConditionExpression:                 s.parts.absent,
		ExpressionAttributeNames:            s.parts.absentNames,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}
	c, err := s.transact(ctx, op, client, put, writes, &retried)
	if err == nil && c.recordFailed && len(c.record) == 0 {
		c.record, err = s.current(ctx, op, req.Key, client, key)
	}
	var seen map[string]types.AttributeValue
	if err == nil && c.recordFailed && !holds(c.record, a.now, a.margin) && !badVersion(c.record) {
		// seen is nil when the record is gone since: the Update's absent
		// arm then holds.
		seen = c.record
		r := s.claimRequest(a.owner, a.payloadHash, a.now, a.margin, a.status, a.expires, a.response, seen)
		retried = false
		c, err = s.transact(ctx, op, client, r.transactItem(s.tableName, key), writes, &retried)
		if err == nil && c.recordFailed && len(c.record) == 0 {
			if c.record, err = s.current(ctx, op, req.Key, client, key); err == nil && len(c.record) == 0 {
				// Present when the condition failed, gone since: the key
				// is free, and a new call takes it.
				err = retry.WithClass(errors.New("dynamostore: the record's condition failed and the record is gone since"), retry.Transient)
			}
		}
	}
	switch {
	case err != nil:
		return dedup.Claim{}, s.wrap(op, req.Key, err)
	case c.ok:
		won := dedup.Claim{Acquired: true, Lease: dedup.Lease{Key: req.Key, Owner: req.Owner}}
		if seen != nil {
			// The Update commits only over the version its Put met, so
			// that record is the one taken over.
			s.hooks.onExpiredPresent(ctx, op)
			if prev, err := decodeRecord(seen); err == nil {
				won.Previous = &prev
				won.Attempt = int(keptAttempts(seen)) + 1
				won.Takeovers = int(keptTakeovers(seen))
			}
		}
		return won, nil
	case c.recordFailed:
		return s.lost(req.Key, req.Owner, dedup.StatusCompleted, c.record, retried)
	default:
		return dedup.Claim{}, s.commitError(ctx, c, writes)
	}
}

// current reads the record of k (item key) with a strongly consistent
// GetItem, for a cancelled transaction that reported the record's
// condition failure without the record (ReturnValuesOnConditionCheckFailure
// is a request, not a promise): nil when there is none now.
func (s *Store) current(ctx context.Context, op, k string, client *ddb.Client, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	in := &ddb.GetItemInput{TableName: s.tableName, Key: key, ConsistentRead: aws.Bool(true)}
	var out *ddb.GetItemOutput
	err := s.do(ctx, op, func(ctx context.Context, _ int) (middleware.Metadata, error) {
		o, err := client.GetItem(ctx, in)
		out = o
		return metadata(o), err
	})
	if err != nil {
		return nil, s.refused(ctx, op, k, in, err)
	}
	return out.Item, nil
}

// Get reads the record with a strongly consistent GetItem.
func (s *Store) Get(ctx context.Context, key string) (dedup.Record, error) {
	const op = "Get"
	k, err := s.layout.key(key)
	if err != nil {
		return dedup.Record{}, err
	}
	in := &ddb.GetItemInput{TableName: aws.String(s.table), Key: k, ConsistentRead: aws.Bool(true)}
	client := s.client(key)
	var out *ddb.GetItemOutput
	err = s.do(ctx, op, func(ctx context.Context, _ int) (middleware.Metadata, error) {
		o, err := client.GetItem(ctx, in)
		out = o
		return metadata(o), err
	})
	if err != nil {
		return dedup.Record{}, s.wrap(op, key, s.refused(ctx, op, key, in, err))
	}
	if len(out.Item) == 0 {
		return dedup.Record{}, fmt.Errorf("dynamostore: get key_hash %s: %w", dedup.KeyHash(key), dedup.ErrNotFound)
	}
	rec, err := decodeRecord(out.Item)
	if err != nil {
		return dedup.Record{}, fmt.Errorf("dynamostore: get key_hash %s: %w", dedup.KeyHash(key), err)
	}
	return rec, nil
}

func (s *Store) wrap(op, key string, err error) error {
	var te *TransactionError
	if isItemTooLarge(err) {
		return fmt.Errorf("dynamostore: %s key_hash %s: %w (%v)", op, dedup.KeyHash(key), &dedup.RecordTooLargeError{Size: maxItemSize + 1, Max: maxItemSize}, err)
	}
	if errors.As(err, &te) {
		return err
	}
	return fmt.Errorf("dynamostore: %s key_hash %s: %w", op, dedup.KeyHash(key), err)
}

// transactItems checks the business writes' types and count.
func transactItems(ws []dedup.Write) ([]types.TransactWriteItem, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	if 1+len(ws) > maxTransactItems {
		return nil, &dedup.TooManyWritesError{Got: len(ws), Max: maxTransactItems - 1}
	}
	out := make([]types.TransactWriteItem, 0, len(ws))
	for i, w := range ws {
		switch w := w.(type) {
		case Write:
			out = append(out, types.TransactWriteItem(w))
		case *Write:
			if w == nil {
				return nil, &dedup.NilWriteError{Index: i, Type: "*dynamostore.Write"}
			}
			out = append(out, types.TransactWriteItem(*w))
		case nil:
			return nil, &dedup.NilWriteError{Index: i, Type: "<nil>"}
		default:
			return nil, fmt.Errorf("%w: write %d is %T, want dynamostore.Write", dedup.ErrUnsupportedWrite, i, w)
		}
	}
	return out, nil
}

// checkResponse refuses a response over MaxResponseSize, then a record too
// large for DynamoDB (see checkSize).
func (s *Store) checkResponse(key map[string]types.AttributeValue, owner, payloadHash string, response []byte) error {
	if err := dedup.CheckResponse(response, s.maxResponse); err != nil {
		return err
	}
	return checkSize(key, owner, payloadHash, response, "")
}

// checkSize estimates the largest item the record can become and refuses
// it before sending when over DynamoDB's limit. Numbers are sized at their
// widest; an unknown payload hash (Complete) as a hex SHA-256.
func checkSize(key map[string]types.AttributeValue, owner, payloadHash string, response []byte, errText string) error {
	if payloadHash == "" {
		payloadHash = "0000000000000000000000000000000000000000000000000000000000000000"
	}
	n := fixedRecordSize + len(owner) + len(payloadHash) + len(errText) + itemSize(key)
	if len(response) > 0 {
		n += len(attrResponse) + len(response)
	}
	if n > maxItemSize {
		return &dedup.RecordTooLargeError{Size: n, Max: maxItemSize}
	}
	return nil
}

// fixedRecordSize is the size of a record's attributes but for the key,
// the response and the values of owner, payload hash and error: their
// names, status at its longest, and numbers at their widest.
var fixedRecordSize = itemSize(map[string]types.AttributeValue{
	attrStatus:    str(string(dedup.StatusCompleted)),
	attrVersion:   num(1 << 62),
	attrOwner:     str(""),
	attrPayload:   str(""),
	attrAttempts:  num(1<<31 - 1),
	attrCreated:   num(maxEpoch),
	attrExpires:   num(maxEpoch),
	attrLease:     num(maxEpoch),
	attrError:     str(""),
	attrTakeovers: num(1<<31 - 1),
})

// String names the store as log lines do: its table, and where its
// client sends requests (the endpoint it was given, else its region;
// each region's, for regional clients). It carries no credential.
func (s *Store) String() string {
	where := make([]string, 0, len(s.clients))
	for _, c := range s.clients {
		o := c.Options()
		w := "region " + o.Region
		if e := aws.ToString(o.BaseEndpoint); e != "" {
			w = endpointName(e)
		}
		where = append(where, w)
	}
	return "DynamoDB table " + s.table + " (" + strings.Join(where, ", ") + ")"
}

// endpointName is an endpoint URL without the user information it might
// carry.
func endpointName(e string) string {
	u, err := url.Parse(e)
	if err != nil {
		return "an endpoint that is not a URL"
	}
	u.User = nil
	return u.String()
}
