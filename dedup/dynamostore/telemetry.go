package dynamostore

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/retry"
)

const instrumentationName = "github.com/onceq/onceq/dedup/dynamostore"

// Attribute keys. The two DynamoDB ones keep the names operators already
// search for (dashboards built on DynamoDB's own error codes, and
// Powertools' logs).
const (
	attrErrorCode    = attribute.Key("dynamo_error_code")
	attrCancelReason = attribute.Key("transact_write_cancellation_reason")
	attrOperation    = attribute.Key("onceq.dynamodb.operation")
	attrThrottle     = attribute.Key("onceq.throttle")
	attrRetryClass   = attribute.Key("onceq.retry.class")
	attrEvidence     = attribute.Key("onceq.archive.evidence")
)

// codeUnknown stands for an error DynamoDB gave no code to (a reset
// connection, a timeout).
const codeUnknown = "unknown"

// maxAttrSets bounds the attribute-set cache: error codes come from the
// wire, so a misbehaving endpoint must not grow it without end.
const maxAttrSets = 512

// telemetry is the store's metrics, through the OpenTelemetry API only.
type telemetry struct {
	errors        metric.Int64Counter
	cancellations metric.Int64Counter
	retries       metric.Int64Counter
	lateDups      metric.Int64Counter

	// Attribute sets are built once per combination: building one per call
	// would allocate on every request.
	mu   sync.RWMutex
	sets map[setKey][]metric.AddOption
}

type setKey struct {
	metric, op, code string
	class            retry.Class
}

func newTelemetry(mp metric.MeterProvider, clock *clockOffset) (*telemetry, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(instrumentationName)
	t := &telemetry{sets: map[setKey][]metric.AddOption{}}
	var err error
	if t.errors, err = m.Int64Counter("onceq.dynamodb.errors",
		metric.WithDescription("DynamoDB requests that returned an error, by error code and operation; onceq.throttle marks throttles (a ConditionalCheckFailedException is a decision, counted under its own code).")); err != nil {
		return nil, err
	}
	if t.cancellations, err = m.Int64Counter("onceq.dynamodb.transaction_cancellations",
		metric.WithDescription("Reasons of cancelled TransactWriteItems, one per cancelled item.")); err != nil {
		return nil, err
	}
	if t.retries, err = m.Int64Counter("onceq.dynamodb.retries",
		metric.WithDescription("DynamoDB requests retried after a backoff, by class (throttled, transient) and error code.")); err != nil {
		return nil, err
	}
	if t.lateDups, err = m.Int64Counter("onceq.dynamodb.ttl_delete_before_retry",
		metric.WithDescription("Claims answered as late duplicates with WithArchive, by onceq.archive.evidence: tombstone (the COMPLETED record was removed by TTL and archived) or expired_record (it had expired and TTL had not removed it yet); the design pattern's dynamo_ttl_delete_before_retry_total.")); err != nil {
		return nil, err
	}
	if _, err = m.Float64ObservableGauge("onceq.dynamodb.clock_offset",
		metric.WithUnit("s"),
		metric.WithDescription("DynamoDB's clock minus this host's, in seconds, estimated from the Date header of responses (positive: DynamoDB is ahead). Claims whose clock is further off than their skew margin are refused."),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			if off, ok := clock.offset(); ok {
				o.Observe(off.Seconds())
			}
			return nil
		})); err != nil {
		return nil, err
	}
	return t, nil
}

// isThrottle tells throttling codes, wherever they appear: a request's
// error code or a cancellation reason.
func isThrottle(code string) bool { return codeClass(code) == retry.Throttled }

func (t *telemetry) options(k setKey, build func() []attribute.KeyValue) []metric.AddOption {
	t.mu.RLock()
	o, ok := t.sets[k]
	t.mu.RUnlock()
	if ok {
		return o
	}
	o = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(build()...))}
	t.mu.Lock()
	if len(t.sets) < maxAttrSets {
		t.sets[k] = o
	}
	t.mu.Unlock()
	return o
}

// requestError counts one failed request. throttled comes from the
// error's class, so a 429 or a throttled cancellation counts too.
func (t *telemetry) requestError(ctx context.Context, op, code string, class retry.Class) {
	if code == "" {
		code = codeUnknown
	}
	throttled := class == retry.Throttled || isThrottle(code)
	c := retry.Transient
	if throttled {
		c = retry.Throttled
	}
	t.errors.Add(ctx, 1, t.options(setKey{metric: "errors", op: op, code: code, class: c}, func() []attribute.KeyValue {
		return []attribute.KeyValue{attrOperation.String(op), attrErrorCode.String(code), attrThrottle.Bool(throttled)}
	})...)
}

func (t *telemetry) cancellation(ctx context.Context, op, reason string) {
	t.cancellations.Add(ctx, 1, t.options(setKey{metric: "cancellations", op: op, code: reason}, func() []attribute.KeyValue {
		return []attribute.KeyValue{attrOperation.String(op), attrCancelReason.String(reason), attrThrottle.Bool(isThrottle(reason))}
	})...)
}

func (t *telemetry) retry(ctx context.Context, op, code string, class retry.Class) {
	if code == "" {
		code = codeUnknown
	}
	t.retries.Add(ctx, 1, t.options(setKey{metric: "retries", op: op, code: code, class: class}, func() []attribute.KeyValue {
		return []attribute.KeyValue{attrOperation.String(op), attrErrorCode.String(code), attrRetryClass.String(class.String()),
			attrThrottle.Bool(class == retry.Throttled)}
	})...)
}

// What a late duplicate was recognised by (WithArchive): a tombstone in
// the archive, or the expired COMPLETED record itself, which TTL had not
// removed yet.
const (
	evidenceTombstone     = "tombstone"
	evidenceExpiredRecord = "expired_record"
)

// lateDuplicate counts a claim answered as a duplicate by WithArchive,
// with its evidence.
func (t *telemetry) lateDuplicate(ctx context.Context, evidence string) {
	t.lateDups.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(attrEvidence.String(evidence))))
}
