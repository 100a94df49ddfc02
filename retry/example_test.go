package retry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onceq/onceq/retry"
)

// sdkError is an error as the AWS SDK's smithy.GenericAPIError is one: what
// Classify reads is its ErrorCode method, whichever SDK the error came from.
type sdkError struct{ Code, Message string }

func (e *sdkError) Error() string     { return "api error " + e.Code + ": " + e.Message }
func (e *sdkError) ErrorCode() string { return e.Code }

// Classify reads an error's class from what it is: a class it states
// itself (WithClass, or a RetryClass method), a cancelled context, an AWS
// error code, an HTTP status. What it does not recognise is Transient:
// retried a bounded number of times rather than blamed on a message.
func ExampleClassify() {
	errs := []error{
		&sdkError{Code: "ThrottlingException", Message: "rate exceeded"},
		fmt.Errorf("claim: %w", &sdkError{Code: "ResourceNotFoundException"}),
		&sdkError{Code: "ConditionalCheckFailedException"},
		retry.WithClass(errors.New("order schema v1 is gone"), retry.Permanent),
		context.DeadlineExceeded,
		errors.New("connection reset by peer"),
	}
	for _, err := range errs {
		c := retry.Classify(err)
		fmt.Printf("%-22s retryable=%t\n", c, c.Retryable())
	}
	// Output:
	// throttled              retryable=true
	// misconfigured          retryable=false
	// condition_failed       retryable=false
	// permanent              retryable=false
	// cancelled              retryable=false
	// transient              retryable=true
}

// Policy.Do retries throttles and transient faults with backoff, and
// returns at once on any other class. observe hears of each retried
// failure: a Store passes the observer the consumer handed it, and that is
// how the consumer learns of the throttles the Store met and slows down.
func ExamplePolicy_Do() {
	ctx := context.Background()
	observe := func(c retry.Class, err error) {
		fmt.Println("consumer saw:", c)
	}
	p := retry.Policy{Initial: time.Millisecond, Max: 10 * time.Millisecond, MaxAttempts: 5}
	calls := 0
	err := p.Do(ctx, func(ctx context.Context) error {
		calls++
		if calls < 3 {
			return &sdkError{Code: "ProvisionedThroughputExceededException"}
		}
		return nil
	}, observe)
	fmt.Println("calls:", calls, "err:", err)

	calls = 0
	err = p.Do(ctx, func(ctx context.Context) error {
		calls++
		return &sdkError{Code: "ValidationException", Message: "item too large"}
	}, observe)
	fmt.Println("calls:", calls, "class:", retry.Classify(err))
	// Output:
	// consumer saw: throttled
	// consumer saw: throttled
	// calls: 3 err: <nil>
	// calls: 1 class: permanent
}

// A Store keeps the observer each consumer over it hands over, and tells
// them all of each throttle it meets, whether Policy.Do retries it or its
// own retryer does, so every consumer's concurrency adapts to them.
func ExampleObservers() {
	var obs retry.Observers
	obs.Add(func(c retry.Class, err error) {
		fmt.Println("observed:", c, "-", err)
	})
	// Inside the Store's call, each time its own retryer backs off:
	err := &sdkError{Code: "ThrottlingException", Message: "rate exceeded"}
	obs.Observe(retry.Classify(err), err)
	// Output:
	// observed: throttled - api error ThrottlingException: rate exceeded
}
