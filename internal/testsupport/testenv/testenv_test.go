package testenv_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testsupport/testenv"
)

func TestContextEndsAfterItsDuration(t *testing.T) {
	ctx := testenv.Context(t, 50*time.Millisecond)
	select {
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("ended with %v", ctx.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("context did not end")
	}
}

func TestEventuallyWaitsForTheCondition(t *testing.T) {
	var polls atomic.Int32
	testenv.Eventually(t, 5*time.Second, "never", func() bool { return polls.Add(1) == 3 })
	if n := polls.Load(); n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}
}

func TestLoggerFollowsTheEnvironment(t *testing.T) {
	t.Setenv(testenv.LogEnv, "")
	if testenv.Logger(t).Enabled(context.Background(), slog.LevelError) {
		t.Fatal("logs without " + testenv.LogEnv)
	}
	t.Setenv(testenv.LogEnv, "warn")
	l := testenv.Logger(t)
	if !l.Enabled(context.Background(), slog.LevelWarn) || l.Enabled(context.Background(), slog.LevelInfo) {
		t.Fatal(testenv.LogEnv + "=warn: want warn and above only")
	}
	t.Setenv(testenv.LogEnv, "1")
	if !testenv.Logger(t).Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal(testenv.LogEnv + "=1: want debug")
	}
}

func TestEmptySegmentFindsWhatSaysNothing(t *testing.T) {
	for _, text := range []string{
		"pgstore: check on table t (misconfigured): : the role lacks SELECT on the records table t (SQLSTATE 42501)",
		": the records table t does not exist",
		"dynamostore: complete: transaction cancelled (transient):",
		"consumer: misconfigured: store: ",
		"redisstore: get (): connection refused",
		"dynamostore: table %!q(int=1) does not exist",
	} {
		if testenv.EmptySegment(text) == "" {
			t.Errorf("EmptySegment(%q) found nothing", text)
		}
	}
	for _, text := range []string{
		"pgstore: check on table t (misconfigured): ERROR: the records table t does not exist (SQLSTATE 42P01)",
		"dial tcp 127.0.0.1:9092: connect: connection refused",
		"consumer: misconfigured: store: dynamostore: table \"orders\" does not exist in this account and region: ResourceNotFoundException: Requested resource not found",
	} {
		if got := testenv.EmptySegment(text); got != "" {
			t.Errorf("EmptySegment(%q) = %q, want none", text, got)
		}
	}
}
