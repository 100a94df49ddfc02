package faultmatrix_test

import (
	"context"
	"crypto/rand"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/redisstore"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/memsource"
)

// A store that hangs (Redis behind a proxy that holds every request)
// turns the worker not ready within 15s, is said on log, and a stop then
// returns within 10s; resumed, the message held is processed.
func TestStorePausedTurnsReadinessAndStopIsPrompt(t *testing.T) {
	t.Parallel()
	p := faultproxy.NewTCP(t, testenv.RedisAddr(t))
	// A prefix of this run's own: a record an earlier run left under the
	// same message would answer m1 as a duplicate, never handled.
	store, err := redisstore.New(redisClient(t, &redis.Options{Addr: p.Addr()}), redisstore.Prefix("pause:"+rand.Text()+":"))
	if err != nil {
		t.Fatal(err)
	}
	q := memsourcetest.NewQueue(t, "orders")
	handled := make(chan string, 4)
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		handled <- string(m.Body)
		return consumer.Result{}, nil
	})
	var logs testenv.LogBuffer
	c, err := consumer.New(q.Source(), store, h, consumer.WithLogger(logs.Logger(-4)), consumer.WithoutDeadLetters())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	_ = q.Send(ctx, memsource.Outgoing{Body: []byte("m1")})
	select {
	case got := <-handled:
		if got != "m1" {
			t.Fatalf("handled %q", got)
		}
	case err := <-done:
		t.Fatalf("Run returned before the first message: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the first message was not handled within 60s")
	}
	testenv.Eventually(t, 10*time.Second, "ready", func() bool { return c.Health().Ready })

	p.Pause()
	paused := time.Now()
	_ = q.Send(ctx, memsource.Outgoing{Body: []byte("m2")})
	testenv.Eventually(t, 20*time.Second, "not ready", func() bool { return !c.Health().Ready })
	took := time.Since(paused)
	if took > 15*time.Second {
		t.Fatalf("not ready %v after the store hung, want within 15s", took)
	}
	t.Logf("store paused: not ready after %v: %v", took.Round(100*time.Millisecond), c.Health().Reasons)
	testenv.Eventually(t, 30*time.Second, "a line saying the store is unavailable", func() bool {
		return strings.Contains(logs.String(), "store unavailable")
	})
	t.Logf("store paused: first line after %v", time.Since(paused).Round(100*time.Millisecond))

	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60s of its cancel")
	}
	stopped := time.Since(start)
	p.Resume()
	if stopped > 10*time.Second {
		t.Fatalf("stop took %v with the store paused, want at most 10s", stopped)
	}
	t.Logf("store paused: stopped in %v", stopped.Round(100*time.Millisecond))
}
