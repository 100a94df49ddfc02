package franztxn_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/franztxn"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// A stop (Run's context cancelled) while the group join is under way, the
// broker holding its answer, returns within 10s: Run does not wait for the
// join to leave the group, and says that the leave goes on.
func TestStopDuringGroupJoinIsPrompt(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.Ports(0))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	joining, release := make(chan struct{}), make(chan struct{})
	var joinOnce, releaseOnce sync.Once
	c.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		joinOnce.Do(func() { close(joining) })
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }); c.Close() })
	addr := c.ListenAddrs()[0]
	in, _, group := names(t)
	createTopic(t, addr, in, 1)
	var logs testenv.LogBuffer
	p, err := franztxn.New(testenv.Context(t, 10*time.Second), []string{addr}, group, []string{in}, group+"-w", fanOut(in+"-out", 1),
		append(fast(), franztxn.RebalanceTimeout(30*time.Second), franztxn.WithLogger(logs.Logger(-4)))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case <-joining:
	case <-time.After(20 * time.Second):
		t.Fatal("the group join never reached the broker")
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		took := time.Since(start)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if took > 10*time.Second {
			t.Fatalf("Run took %v to return with the join under way, want at most 10s", took)
		}
		t.Logf("stopped in %v with the join under way", took.Round(100*time.Millisecond))
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60s of its context's end")
	}
	// The leave, which the stop did not wait for, ends once the broker
	// answers.
	releaseOnce.Do(func() { close(release) })
	p.Close()
}
