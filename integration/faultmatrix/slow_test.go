// A handler slower than a store call's timeout (10 s) but well within
// HandlerTimeout commits on its first run. (When the store call's context
// was taken before the handler started, it had expired by the time the
// handler returned: the message was held as if DynamoDB were down, its own
// lease then blocked it, and the handler ran again and again.)

package faultmatrix_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
)

func init() {
	cases = append(cases, matrixCase{name: "slow-handler-12s", run: slowHandler})
}

// No fault at all: a handler that takes 12 s (HandlerTimeout 30 s, the
// default) is processed once, on its first run.
func slowHandler(t *testing.T, f *fixture) string {
	f.tables()
	f.queues(0, true)
	const key = "order-slow"
	h := f.handler(func(ctx context.Context, _ *consumer.Message, _ int) error {
		select {
		case <-time.After(12 * time.Second):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	f.send(key)
	w := f.start("worker", f.store(), h)
	f.waitEffects(t, 40*time.Second)
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := f.rec.runsOf(key); n != 1 {
		t.Fatalf("%d handler runs, want 1", n)
	}
	return fmt.Sprintf("processed on the first run (%s)", f.rec.kinds())
}
