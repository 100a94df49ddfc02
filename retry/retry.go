// Package retry classifies store and broker errors and backs off the ones
// worth retrying. Throttles are counted apart from condition failures, which
// are decisions and are never retried.
//
// Classification is by the error's code (the ErrorCode method smithy-go's
// APIError has) and HTTP status, so this package imports no SDK.
package retry

import (
	"context"
	"errors"
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
	// Permanent: validation, access, missing resource: retrying is futile.
	Permanent
	// Cancelled: the caller's context ended.
	Cancelled
)

var classNames = [...]string{"transient", "throttled", "condition_failed", "transaction_cancelled", "permanent", "cancelled"}

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
	"AccessDeniedException":                    Permanent,
	"AccessDenied":                             Permanent,
	"UnrecognizedClientException":              Permanent,
	"ResourceNotFoundException":                Permanent,
	"ItemCollectionSizeLimitExceededException": Permanent,
	"SerializationException":                   Permanent,
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

// Backoff returns a fresh backoff.BackOff following the policy, bound to ctx.
func (p Policy) Backoff(ctx context.Context) backoff.BackOff {
	p = p.withDefaults()
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = p.Initial
	b.MaxInterval = p.Max
	b.Multiplier = p.Multiplier
	b.RandomizationFactor = p.Jitter
	b.MaxElapsedTime = p.MaxElapsed
	b.Reset()
	return backoff.WithContext(backoff.WithMaxRetries(b, uint64(p.MaxAttempts-1)), ctx)
}

// Do calls op until it succeeds, fails with a class that is not retried, or
// the policy gives up; it returns op's last error. observe, if not nil, is
// told of every retryable failure with its class (the last one too, when
// the policy gives up), so throttles are counted whoever retries them.
func (p Policy) Do(ctx context.Context, op func(ctx context.Context) error, observe func(Class, error)) error {
	b := p.Backoff(ctx)
	var last error
	err := backoff.Retry(func() error {
		err := op(ctx)
		if err == nil {
			return nil
		}
		last = err
		class := Classify(err)
		if !class.Retryable() || ctx.Err() != nil {
			return backoff.Permanent(err)
		}
		if observe != nil {
			observe(class, err)
		}
		if o, ok := ctx.Value(observerKey{}).(func(Class, error)); ok {
			o(class, err)
		}
		return err
	}, b)
	if err == nil {
		return nil
	}
	if last != nil {
		return last
	}
	return err
}

type observerKey struct{}

// WithObserver returns a context whose Policy.Do calls also tell observe of
// every retryable failure. The consumer uses it to learn of throttles that
// a store retried on its own, to adapt its concurrency.
func WithObserver(ctx context.Context, observe func(Class, error)) context.Context {
	return context.WithValue(ctx, observerKey{}, observe)
}
