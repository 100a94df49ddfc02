package retry_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/onceq/onceq/retry"
)

// apiError has the methods smithy-go's APIError and ResponseError have.
type apiError struct {
	code   string
	status int
}

func (e apiError) Error() string       { return e.code }
func (e apiError) ErrorCode() string   { return e.code }
func (e apiError) HTTPStatusCode() int { return e.status }

type statusOnly int

func (s statusOnly) Error() string       { return fmt.Sprint(int(s)) }
func (s statusOnly) HTTPStatusCode() int { return int(s) }

func TestClassify(t *testing.T) {
	cases := []struct {
		err  error
		want retry.Class
	}{
		{apiError{"ProvisionedThroughputExceededException", 400}, retry.Throttled},
		{apiError{"ThrottlingException", 400}, retry.Throttled},
		{apiError{"RequestLimitExceeded", 400}, retry.Throttled},
		{apiError{"ConditionalCheckFailedException", 400}, retry.ConditionFailed},
		{apiError{"TransactionCanceledException", 400}, retry.TransactionCancelled},
		{apiError{"TransactionConflictException", 400}, retry.Transient},
		{apiError{"ValidationException", 400}, retry.Permanent},
		{apiError{"AccessDeniedException", 400}, retry.Misconfigured},
		{apiError{"ResourceNotFoundException", 400}, retry.Misconfigured},
		{apiError{"UnrecognizedClientException", 400}, retry.Misconfigured},
		{apiError{"AWS.SimpleQueueService.NonExistentQueue", 400}, retry.Misconfigured},
		{fmt.Errorf("wrapped: %w", apiError{"ThrottlingException", 400}), retry.Throttled},
		{statusOnly(500), retry.Transient},
		{statusOnly(503), retry.Transient},
		{statusOnly(429), retry.Throttled},
		{statusOnly(403), retry.Misconfigured},
		{statusOnly(401), retry.Misconfigured},
		{statusOnly(400), retry.Permanent},
		{&net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, retry.Transient},
		{context.Canceled, retry.Cancelled},
		{fmt.Errorf("op: %w", context.DeadlineExceeded), retry.Cancelled},
		{errors.New("never seen"), retry.Transient},
	}
	for _, c := range cases {
		if got := retry.Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

type selfClassified struct{}

func (selfClassified) Error() string           { return "x" }
func (selfClassified) RetryClass() retry.Class { return retry.Throttled }

func TestClassifierWins(t *testing.T) {
	if got := retry.Classify(fmt.Errorf("w: %w", selfClassified{})); got != retry.Throttled {
		t.Fatalf("got %v", got)
	}
}

func TestPolicyRetriesOnlyRetryable(t *testing.T) {
	p := retry.Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond, MaxAttempts: 5}
	for _, tc := range []struct {
		err   error
		calls int
	}{
		{apiError{"ThrottlingException", 400}, 5},
		{statusOnly(500), 5},
		{apiError{"ConditionalCheckFailedException", 400}, 1},
		{apiError{"ValidationException", 400}, 1},
	} {
		calls, seen := 0, 0
		err := p.Do(context.Background(), func(context.Context) error { calls++; return tc.err },
			func(retry.Class, error) { seen++ })
		if calls != tc.calls || !errors.Is(err, tc.err) {
			t.Errorf("%v: %d calls, err %v; want %d calls and the op's error", tc.err, calls, err, tc.calls)
		}
		if tc.calls > 1 && seen != tc.calls {
			t.Errorf("%v: observer saw %d of %d retryable failures", tc.err, seen, tc.calls)
		}
	}
	calls := 0
	err := p.Do(context.Background(), func(context.Context) error {
		calls++
		if calls < 3 {
			return apiError{"ThrottlingException", 400}
		}
		return nil
	}, nil)
	if err != nil || calls != 3 {
		t.Fatalf("recovering op: %d calls, %v", calls, err)
	}
}

func TestPolicyStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := retry.Policy{Initial: 50 * time.Millisecond, MaxAttempts: 100, MaxElapsed: time.Minute}
	calls := 0
	err := p.Do(ctx, func(context.Context) error {
		calls++
		cancel()
		return statusOnly(500)
	}, nil)
	if calls != 1 || err == nil {
		t.Fatalf("%d calls after cancel, err %v", calls, err)
	}
}

// Every observer added is told of each retried failure, through the
// callback a Store hands Policy.Do.
func TestObserversSeeRetries(t *testing.T) {
	var obs retry.Observers
	obs.Observe(retry.Throttled, nil) // none yet: nothing to tell
	var first, second []retry.Class
	obs.Add(func(c retry.Class, _ error) { first = append(first, c) })
	obs.Add(nil)
	obs.Add(func(c retry.Class, _ error) { second = append(second, c) })
	calls := 0
	_ = retry.Policy{Initial: time.Millisecond, MaxAttempts: 3}.Do(context.Background(), func(context.Context) error {
		calls++
		if calls == 1 {
			return apiError{"ThrottlingException", 400}
		}
		return nil
	}, obs.Observe)
	if len(first) != 1 || first[0] != retry.Throttled || len(second) != 1 || second[0] != retry.Throttled {
		t.Fatalf("observers saw %v and %v, want one throttle each", first, second)
	}
}

func TestWithClass(t *testing.T) {
	base := errors.New("base")
	err := fmt.Errorf("op: %w", retry.WithClass(base, retry.Misconfigured))
	if retry.Classify(err) != retry.Misconfigured || !errors.Is(err, base) || err.Error() != "op: base" {
		t.Fatalf("WithClass: class %v, Is %v, text %q", retry.Classify(err), errors.Is(err, base), err)
	}
	if retry.WithClass(nil, retry.Permanent) != nil {
		t.Fatal("WithClass(nil) is not nil")
	}
}

// BenchmarkPolicyDo is the cost a Policy adds to a call that succeeds at
// once, the common case of every store call.
func BenchmarkPolicyDo(b *testing.B) {
	p := retry.DefaultPolicy()
	ctx := context.Background()
	op := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Do(ctx, op, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// MaxElapsed counts from the first attempt, its own time included: a
// wait that would end past it is not begun.
func TestPolicyMaxElapsedFromTheFirstAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := retry.Policy{Initial: 2 * time.Second, Jitter: 0.01, MaxElapsed: 4 * time.Second, MaxAttempts: 10}
		calls, seen := 0, 0
		start := time.Now()
		err := p.Do(t.Context(), func(context.Context) error {
			calls++
			time.Sleep(3 * time.Second) // a slow first answer
			return statusOnly(503)
		}, func(retry.Class, error) { seen++ })
		if calls != 1 || seen != 1 || !errors.Is(err, statusOnly(503)) {
			t.Fatalf("%d calls, %d observed, err %v; want 1, 1 and the op's error", calls, seen, err)
		}
		if took := time.Since(start); took != 3*time.Second {
			t.Fatalf("gave up after %v, want right after the first attempt (3s)", took)
		}
	})
}

// A context that ends during a wait ends it: Do returns the op's last
// error at once, not the cancellation.
func TestPolicyCancelDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		p := retry.Policy{Initial: time.Hour, Max: time.Hour, MaxElapsed: 10 * time.Hour, MaxAttempts: 3}
		start := time.Now()
		err := p.Do(ctx, func(context.Context) error { return statusOnly(500) }, nil)
		if !errors.Is(err, statusOnly(500)) || time.Since(start) != time.Second {
			t.Fatalf("err %v after %v; want the op's error when ctx ended (1s)", err, time.Since(start))
		}
	})
}

// A call that succeeds first time costs the op alone: nothing of the
// backoff is built.
func TestPolicyFirstSuccessAllocatesNothing(t *testing.T) {
	p := retry.DefaultPolicy()
	ctx := context.Background()
	op := func(context.Context) error { return nil }
	if n := testing.AllocsPerRun(100, func() { _ = p.Do(ctx, op, nil) }); n != 0 {
		t.Fatalf("%v allocations per successful call, want 0", n)
	}
}
