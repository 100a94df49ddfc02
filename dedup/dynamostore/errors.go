package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	smithy "github.com/aws/smithy-go"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/retry"
)

// LeaseLostError is the fence failing: the record is no longer the PENDING
// record of the caller's lease. errors.Is(err, dedup.ErrLeaseLost) holds.
type LeaseLostError struct {
	Op    string
	Lease dedup.Lease
	// Current is the record as DynamoDB saw it when the condition failed,
	// nil when the item was absent (e.g. deleted by TTL).
	Current *dedup.Record
}

func (e *LeaseLostError) Error() string {
	s := fmt.Sprintf("dynamostore: %s key_hash %s: lease lost (owner %q, version %d)", e.Op, dedup.KeyHash(e.Lease.Key), e.Lease.Owner, e.Lease.Version)
	if e.Current == nil {
		return s + ": record absent"
	}
	return s + fmt.Sprintf(": record is %s, owner %q, version %d", e.Current.Status, e.Current.Owner, e.Current.Version)
}

// Is makes errors.Is(err, dedup.ErrLeaseLost) true.
func (e *LeaseLostError) Is(target error) bool { return target == dedup.ErrLeaseLost }

// RetryClass: a lost lease is a condition's decision.
func (e *LeaseLostError) RetryClass() retry.Class { return retry.ConditionFailed }

// TableNotFoundError names a table of a transaction that does not exist
// in the client's account and region (DynamoDB's ResourceNotFoundException
// does not say which). errors.As reaches the SDK's error through it, and
// it is classed retry.Misconfigured.
type TableNotFoundError struct {
	Table string
	err   error
}

func (e *TableNotFoundError) Error() string {
	return fmt.Sprintf("dynamostore: table %q does not exist in this account and region: %v", e.Table, e.err)
}

// Unwrap gives the SDK's *types.ResourceNotFoundException.
func (e *TableNotFoundError) Unwrap() error { return e.err }

// missingTable is err as a *TableNotFoundError naming table when it is
// DynamoDB's ResourceNotFoundException of a call on that table alone
// (which does not say which table), else err.
func missingTable(table string, err error) error {
	var rnf *types.ResourceNotFoundException
	if errors.As(err, &rnf) && !errors.As(err, new(*TableNotFoundError)) {
		return &TableNotFoundError{Table: table, err: err}
	}
	return err
}

// TransactionError is a cancelled TransactWriteItems whose reasons are not
// a condition of the record or of a business write: a conflict or a
// throttle (retried), or a size or validation failure (permanent).
type TransactionError struct {
	Op string
	// Reasons are DynamoDB's, by item index (0 is the record).
	Reasons []types.CancellationReason
	class   retry.Class
	err     error
}

func (e *TransactionError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dynamostore: %s: transaction cancelled (%s):", e.Op, e.class)
	given := false
	for i, r := range e.Reasons {
		code := deref(r.Code)
		if code == "" || code == "None" {
			continue
		}
		given = true
		fmt.Fprintf(&b, " [%d] %s", i, code)
		if m := deref(r.Message); m != "" {
			fmt.Fprintf(&b, " (%s)", m)
		}
	}
	if !given {
		b.WriteString(" DynamoDB gave no reason")
	}
	return b.String()
}

// Unwrap gives the SDK's *types.TransactionCanceledException.
func (e *TransactionError) Unwrap() error { return e.err }

// RetryClass tells retry.Policy whether the cancellation is worth retrying.
func (e *TransactionError) RetryClass() retry.Class { return e.class }

// ErrorCode is the first non-"None" reason, for hooks and logs.
func (e *TransactionError) ErrorCode() string {
	for _, r := range e.Reasons {
		if c := deref(r.Code); c != "" && c != "None" {
			return c
		}
	}
	return "TransactionCanceledException"
}

// codeClass classifies a DynamoDB error code or cancellation reason through
// retry.Classify, which holds the one list of codes: an unknown reason is
// Transient there, retried a bounded number of times.
func codeClass(code string) retry.Class { return retry.Classify(codeError(code)) }

// codeError is a bare DynamoDB error code, to classify.
type codeError string

func (c codeError) Error() string     { return string(c) }
func (c codeError) ErrorCode() string { return string(c) }

// cancellation is what a TransactionCanceledException means for us.
type cancellation struct {
	ok           bool                            // no cancellation: committed
	recordFailed bool                            // the record's condition failed
	record       map[string]types.AttributeValue // its ALL_OLD item then
	business     int                             // index in Writes of a failed write condition, or -1
	reason       types.CancellationReason
	reasons      []types.CancellationReason // all of them, by index
}

// readCancellation reads the reasons by index. The record's condition
// decides first (a fenced worker must neither retry nor be told its write
// was rejected); then a permanent reason; then a retryable one, even over a
// business condition, which may read differently once the conflict is gone.
// A nil error means c.recordFailed or c.business >= 0.
// tel may be nil.
func readCancellation(ctx context.Context, op string, tce *types.TransactionCanceledException, h *hooks, tel *telemetry) (cancellation, error) {
	c := cancellation{business: -1, reasons: tce.CancellationReasons}
	permanent := false
	retryable := retry.Class(-1)
	for i, r := range tce.CancellationReasons {
		code := deref(r.Code)
		if code == "" || code == "None" {
			continue
		}
		h.onCancellation(ctx, op, code)
		if tel != nil {
			tel.cancellation(ctx, op, code)
		}
		switch class := codeClass(code); {
		case class == retry.ConditionFailed && i == 0:
			c.recordFailed, c.record = true, r.Item
		case class == retry.ConditionFailed:
			if c.business < 0 {
				c.business, c.reason = i-1, r
			}
		case class == retry.Permanent:
			permanent = true
		case class == retry.Throttled:
			retryable = retry.Throttled
		case retryable < 0:
			retryable = retry.Transient
		}
	}
	switch {
	case c.recordFailed:
		return c, nil
	case permanent:
		return c, &TransactionError{Op: op, Reasons: tce.CancellationReasons, class: retry.Permanent, err: tce}
	case retryable >= 0:
		return c, &TransactionError{Op: op, Reasons: tce.CancellationReasons, class: retryable, err: tce}
	case c.business >= 0:
		return c, nil
	}
	// No reason given: unknown faults are retried a bounded number of times.
	return c, &TransactionError{Op: op, Reasons: tce.CancellationReasons, class: retry.Transient, err: tce}
}

func businessError(c cancellation) error {
	return &dedup.BusinessConditionError{Index: c.business, Reason: deref(c.reason.Code), Message: deref(c.reason.Message)}
}

// errorCode is the DynamoDB error code of err, "" when it has none; for a
// cancelled transaction, its first reason (e.g. "TransactionConflict").
func errorCode(err error) string {
	var te *TransactionError
	if errors.As(err, &te) {
		return te.ErrorCode()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// isItemTooLarge recognises DynamoDB's own size refusal, for records the
// estimate let through.
func isItemTooLarge(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "ValidationException" &&
		strings.Contains(ae.ErrorMessage(), "size has exceeded")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ErrCorruptRecord: a stored item is not a record this package writes (a
// missing or mistyped attribute, an unknown status, a PENDING record
// without its lease expiry). The error is a *CorruptRecordError. Both are
// dedup's, the same from every Store.
var ErrCorruptRecord = dedup.ErrCorruptRecord

// ErrNoLeaseExpiry: a Claim whose LeaseUntil is not after its Now. A
// PENDING record must expire, or a crashed owner's key is held forever.
var ErrNoLeaseExpiry = errors.New("dynamostore: claim without a lease expiry after Now")

// CorruptRecordError says which stored item could not be decoded and why;
// its KeyHash is dedup.KeyHash of the item's stored key (pk, or pk#sk in
// the tenant layout), when it has a readable one, and its Err what is
// wrong with the item.
type CorruptRecordError = dedup.CorruptRecordError

// RequestRefusedError is DynamoDB refusing as invalid (ValidationException)
// a request this package built alone, with no business write of the
// caller's in it: an expression DynamoDB cannot parse, a key of another
// table layout. That is a fault of the store's code or of the deployment,
// never of the message, so it is classed retry.Misconfigured: a consumer
// gives the message back without charging an attempt, and stops. A refused
// transaction with business writes keeps DynamoDB's Permanent class, since
// the writes may be what it refused. errors.As reaches the SDK's error
// through it.
//
// The fields are the request's shape, what an operator needs to find the
// fault: never a value of it (the key, the owner, the response).
type RequestRefusedError struct {
	// Op is the Store call (Claim, Complete, ...), Request DynamoDB's
	// operation (PutItem, UpdateItem, GetItem).
	Op, Request string
	// UpdateExpression and ConditionExpression are as sent, with
	// placeholders for every value ("" when the request has none).
	UpdateExpression, ConditionExpression string
	// AttributeNames are the attributes the request names, sorted: those
	// of its expressions and of the item it puts or reads.
	AttributeNames []string
	err            error
}

func (e *RequestRefusedError) Error() string {
	return fmt.Sprintf("dynamostore: %s: DynamoDB refused the %s this store built (update %q, condition %q, attributes %s): %v",
		e.Op, e.Request, e.UpdateExpression, e.ConditionExpression, strings.Join(e.AttributeNames, ","), e.err)
}

// Unwrap gives the SDK's error.
func (e *RequestRefusedError) Unwrap() error { return e.err }

// RetryClass: the same request is refused again until the code or the
// deployment changes.
func (e *RequestRefusedError) RetryClass() retry.Class { return retry.Misconfigured }

// refused turns DynamoDB's refusal of in, a request built here alone, into
// a *RequestRefusedError, and logs its shape with the key's hash; a
// missing table (the records table, the one table in names) into a
// *TableNotFoundError; any other error, and a record too large (the
// message's), it returns as is.
func (s *Store) refused(ctx context.Context, op, key string, in any, err error) error {
	if errors.As(err, new(*types.ResourceNotFoundException)) {
		return missingTable(s.table, err)
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "ValidationException" || isItemTooLarge(err) {
		return err
	}
	e := &RequestRefusedError{Op: op, err: err}
	var names []string
	add := func(aliases map[string]string, attrs map[string]types.AttributeValue) {
		for _, n := range aliases {
			names = append(names, n)
		}
		for n := range attrs {
			names = append(names, n)
		}
	}
	switch in := in.(type) {
	case *ddb.PutItemInput:
		e.Request, e.ConditionExpression = "PutItem", deref(in.ConditionExpression)
		add(in.ExpressionAttributeNames, in.Item)
	case *ddb.UpdateItemInput:
		e.Request, e.UpdateExpression, e.ConditionExpression = "UpdateItem", deref(in.UpdateExpression), deref(in.ConditionExpression)
		add(in.ExpressionAttributeNames, in.Key)
	case *ddb.GetItemInput:
		e.Request = "GetItem"
		add(nil, in.Key)
	}
	slices.Sort(names)
	e.AttributeNames = slices.Compact(names)
	s.log.ErrorContext(ctx, "dynamostore: DynamoDB refused a request this store built: a fault of the store or of the deployment (the table's layout), not of the message",
		"op", op, "dynamo_operation", e.Request, "update_expression", e.UpdateExpression, "condition_expression", e.ConditionExpression,
		"attribute_names", strings.Join(e.AttributeNames, ","), "key_hash", dedup.KeyHash(key), "err", err)
	return e
}
