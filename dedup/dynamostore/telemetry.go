package dynamostore

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/retry"
)

const instrumentationName = "github.com/onceq/onceq/dedup/dynamostore"

// Attribute keys of DynamoDB's own metrics; the operation and the throttle
// mark are those of every store (package storeinstr). The cancellation
// reason keeps the name operators already search for (Powertools' logs).
const (
	attrCancelReason = attribute.Key("transact_write_cancellation_reason")
	attrEvidence     = attribute.Key("onceq.archive.evidence")
)

// maxAttrSets bounds the attribute-set cache: error codes come from the
// wire, so a misbehaving endpoint must not grow it without end.
const maxAttrSets = 512

// telemetry is the store's metrics, through the OpenTelemetry API only.
// (Errors, retries and request durations are counted by the instruments
// every store has: see package storeinstr.)
type telemetry struct {
	cancellations metric.Int64Counter
	lateDups      metric.Int64Counter

	// Attribute sets are built once per combination: building one per call
	// would allocate on every request.
	mu   sync.RWMutex
	sets map[setKey][]metric.AddOption
}

type setKey struct{ metric, op, code string }

func newTelemetry(mp metric.MeterProvider, clock *clockOffset) (*telemetry, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(instrumentationName)
	t := &telemetry{sets: map[setKey][]metric.AddOption{}}
	var err error
	if t.cancellations, err = m.Int64Counter("onceq.dynamodb.transaction_cancellations",
		metric.WithDescription("Reasons of cancelled TransactWriteItems, one per cancelled item.")); err != nil {
		return nil, err
	}
	if t.lateDups, err = m.Int64Counter("onceq.dynamodb.ttl_delete_before_retry",
		metric.WithDescription("Claims answered as late duplicates with WithArchive, by onceq.archive.evidence: tombstone (the COMPLETED record was removed by TTL and archived) or expired_record (it had expired and TTL had not removed it yet). Each is a redelivery that came after Retention and was still answered as a duplicate.")); err != nil {
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

func (t *telemetry) cancellation(ctx context.Context, op, reason string) {
	t.cancellations.Add(ctx, 1, t.options(setKey{metric: "cancellations", op: op, code: reason}, func() []attribute.KeyValue {
		return []attribute.KeyValue{storeinstr.AttrOperation.String(storeOp(op)), attrCancelReason.String(reason), storeinstr.AttrThrottle.Bool(isThrottle(reason))}
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
