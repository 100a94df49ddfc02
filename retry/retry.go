package retry

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Class is what kind of failure an error is.
type Class int

const (
	// Transient: a fault worth retrying (5xx, reset connection, conflict).
	Transient Class = iota
	// Throttled: the service shed load; back off and count it as such.
	Throttled
	// ConditionFailed: a condition said no. A decision: never retried.
	ConditionFailed
	// TransactionCancelled: a transaction was cancelled for a reason that
	// retrying will not fix (a condition, a size limit).
	TransactionCancelled
	// Permanent: the request itself is invalid (validation, an item too
	// large): retrying the same request is futile.
	Permanent
	// Cancelled: the caller's context ended.
	Cancelled
	// Misconfigured: a missing table or queue, denied access, unknown
	// credentials, a clock too far off: the deployment is wrong, not the
	// request. Retrying is futile until an operator acts.
	Misconfigured
)

var classNames = [...]string{"transient", "throttled", "condition_failed", "transaction_cancelled", "permanent", "cancelled", "misconfigured"}

func (c Class) String() string {
	if c >= 0 && int(c) < len(classNames) {
		return classNames[c]
	}
	return "unknown"
}

// Retryable reports whether a Policy retries errors of this class.
func (c Class) Retryable() bool { return c == Transient || c == Throttled }

// Classifier lets an error state its own class; Classify asks it first.
type Classifier interface{ RetryClass() Class }

// WithClass returns err stating its class: Classify answers class for it
// (and for errors wrapping it) instead of guessing. errors.Is and As see
// through to err.
func WithClass(err error, class Class) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, class: class}
}

type classified struct {
	err   error
	class Class
}

func (e *classified) Error() string     { return e.err.Error() }
func (e *classified) Unwrap() error     { return e.err }
func (e *classified) RetryClass() Class { return e.class }

type coder interface{ ErrorCode() string }

type httpStatuser interface{ HTTPStatusCode() int }

// Codes of the AWS errors Classify knows.
var codeClasses = map[string]Class{
	"ProvisionedThroughputExceededException":   Throttled,
	"ThrottlingException":                      Throttled,
	"Throttling":                               Throttled,
	"ThrottledException":                       Throttled,
	"RequestLimitExceeded":                     Throttled,
	"RequestThrottled":                         Throttled,
	"RequestThrottledException":                Throttled,
	"TooManyRequestsException":                 Throttled,
	"ConditionalCheckFailedException":          ConditionFailed,
	"TransactionCanceledException":             TransactionCancelled,
	"TransactionConflictException":             Transient,
	"TransactionInProgressException":           Transient,
	"InternalServerError":                      Transient,
	"InternalFailure":                          Transient,
	"ServiceUnavailable":                       Transient,
	"ValidationException":                      Permanent,
	"ItemCollectionSizeLimitExceededException": Permanent,
	"SerializationException":                   Permanent,
	"AccessDeniedException":                    Misconfigured,
	"AccessDenied":                             Misconfigured,
	"UnrecognizedClientException":              Misconfigured,
	"InvalidClientTokenId":                     Misconfigured,
	"InvalidSignatureException":                Misconfigured,
	"SignatureDoesNotMatch":                    Misconfigured,
	"MissingAuthenticationToken":               Misconfigured,
	"ExpiredToken":                             Misconfigured,
	"ExpiredTokenException":                    Misconfigured,
	"ResourceNotFoundException":                Misconfigured,
	"TableNotFoundException":                   Misconfigured,
	"QueueDoesNotExist":                        Misconfigured,
	"AWS.SimpleQueueService.NonExistentQueue":  Misconfigured,
	"KMS.AccessDeniedException":                Misconfigured,
	"KmsAccessDenied":                          Misconfigured,
	// Cancellation reasons of a DynamoDB TransactWriteItems, per item.
	"ThrottlingError":                 Throttled,
	"ProvisionedThroughputExceeded":   Throttled,
	"TransactionConflict":             Transient,
	"ConditionalCheckFailed":          ConditionFailed,
	"ItemCollectionSizeLimitExceeded": Permanent,
	"ValidationError":                 Permanent,
}

// Classify says which Class err belongs to. Unknown errors are Transient,
// so a fault never met before is retried a bounded number of times rather
// than dropping a message.
func Classify(err error) Class {
	if err == nil {
		return Transient
	}
	var c Classifier
	if errors.As(err, &c) {
		return c.RetryClass()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Cancelled
	}
	var ce coder
	if errors.As(err, &ce) {
		if class, ok := codeClasses[ce.ErrorCode()]; ok {
			return class
		}
	}
	var hs httpStatuser
	if errors.As(err, &hs) {
		switch code := hs.HTTPStatusCode(); {
		case code == 429:
			return Throttled
		case code == 401 || code == 403:
			return Misconfigured
		case code >= 500:
			return Transient
		case code >= 400:
			return Permanent
		}
	}
	// Network errors (resets, timeouts) and anything unknown are transient.
	return Transient
}

// Policy is an exponential backoff with jitter, bounded by attempts and by
// elapsed time, that retries only Throttled and Transient errors.
type Policy struct {
	Initial     time.Duration // first delay; default 25ms
	Max         time.Duration // cap of one delay; default 2s
	Multiplier  float64       // default 2
	Jitter      float64       // randomization factor 0..1; default 0.5
	MaxElapsed  time.Duration // give up after; default 20s
	MaxAttempts int           // calls in all, including the first; default 8
}

// DefaultPolicy is a Policy with every default.
func DefaultPolicy() Policy { return Policy{}.withDefaults() }

func (p Policy) withDefaults() Policy {
	if p.Initial <= 0 {
		p.Initial = 25 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 2 * time.Second
	}
	if p.Multiplier < 1 {
		p.Multiplier = 2
	}
	if p.Jitter <= 0 || p.Jitter > 1 {
		p.Jitter = 0.5
	}
	if p.MaxElapsed <= 0 {
		p.MaxElapsed = 20 * time.Second
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 8
	}
	return p
}

// Do calls op until it succeeds, fails with a class that is not retried, or
// the policy gives up; it returns op's last error. observe, if not nil, is
// told of every retryable failure with its class (the last one too, when
// the policy gives up): a Store or Source passes the observer the
// consumer handed it (see Observers), so that throttles are counted
// whoever retries them. The waits are
// cenkalti/backoff's exponential backoff: Initial × Multiplier^(n-1),
// capped at Max, spread by ±Jitter, never past MaxElapsed.
func (p Policy) Do(ctx context.Context, op func(ctx context.Context) error, observe func(Class, error)) error {
	// The first attempt runs before anything of the backoff is built: it
	// is the only one of almost every call, so a success costs op alone.
	start := time.Now()
	err := op(ctx)
	if err == nil {
		return nil
	}
	p = p.withDefaults()
	var b *backoff.ExponentialBackOff
	for attempt := 1; ; attempt++ {
		class := Classify(err)
		if !class.Retryable() || ctx.Err() != nil {
			return err
		}
		if observe != nil {
			observe(class, err)
		}
		if attempt >= p.MaxAttempts {
			return err
		}
		if b == nil {
			b = backoff.NewExponentialBackOff(
				backoff.WithInitialInterval(p.Initial),
				backoff.WithMaxInterval(p.Max),
				backoff.WithMultiplier(p.Multiplier),
				backoff.WithRandomizationFactor(p.Jitter),
				backoff.WithMaxElapsedTime(0), // checked below, from the first attempt
			)
		}
		wait := b.NextBackOff()
		if time.Since(start)+wait > p.MaxElapsed {
			return err
		}
		// The op's own error, also when ctx ends during the wait: callers
		// classify what the store said, not the cancellation.
		if !sleep(ctx, wait) {
			return err
		}
		if err = op(ctx); err == nil {
			return nil
		}
	}
}

// sleep waits d, and reports false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Observers is the observers a component tells of each failure it
// retries: a Store keeps in one the observer each Guard or Consumer over
// it hands over (dedup.Runtime), and calls Observe from its Policy.Do
// callback. The zero value has none; it is safe for concurrent use.
type Observers struct {
	mu   sync.Mutex // serializes Add
	list atomic.Pointer[[]func(Class, error)]
}

// Add makes observe one of the observers; nil is ignored.
func (o *Observers) Add(observe func(Class, error)) {
	if observe == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var list []func(Class, error)
	if old := o.list.Load(); old != nil {
		list = append(list, *old...)
	}
	list = append(list, observe)
	o.list.Store(&list)
}

// Observe tells every observer of a retryable failure of class.
func (o *Observers) Observe(class Class, err error) {
	if list := o.list.Load(); list != nil {
		for _, f := range *list {
			f(class, err)
		}
	}
}
