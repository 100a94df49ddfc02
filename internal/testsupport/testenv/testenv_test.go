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
