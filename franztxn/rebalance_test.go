package franztxn_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/franztxn"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// A second member joins mid-stream and leaves again while records flow,
// each member's client holding fetched records well past its small
// transactions when the rebalances come: every input's output is read
// exactly once, none of the buffered records lost or doubled. (A
// transaction that a rebalance overtakes, its generation ended before it
// committed, is aborted and its records read again.)
func TestRebalanceMidStream(t *testing.T) {
	addr := brokerAddr(t)
	in, out, group := names(t)
	createTopic(t, addr, in, 4)
	createTopic(t, addr, out, 2)
	committed := newReader(t, addr, out, true)
	const per, total = 2, 900
	c1, c2 := &counter{}, &counter{}
	// The inputs flow in the background for the whole test.
	feeding := make(chan struct{})
	prod := client(t, addr, kgo.ProducerLinger(0))
	t.Cleanup(func() { <-feeding }) // before prod closes
	go func() {
		defer close(feeding)
		for i := 0; i < total; i += 50 {
			if err := inputs(prod, in, i, i+50); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
		}
	}()
	start(t, addr, group, in, group+"-1", fanOut(out, per), franztxn.MaxPollRecords(10), franztxn.WithHooks(c1))
	testenv.Eventually(t, 30*time.Second, "the first member commits", func() bool { n, _, _, _ := c1.get(); return n >= 3 })

	second := start(t, addr, group, in, group+"-2", fanOut(out, per), franztxn.MaxPollRecords(10), franztxn.WithHooks(c2))
	testenv.Eventually(t, 30*time.Second, "the second member takes partitions", func() bool { _, _, _, a := c2.get(); return a >= 1 })
	testenv.Eventually(t, 30*time.Second, "the second member commits", func() bool { n, _, _, _ := c2.get(); return n >= 1 })
	_, _, _, assigned := c1.get()
	if err := second.stop(t); err != nil {
		t.Fatalf("second member's Run: %v", err)
	}
	testenv.Eventually(t, 30*time.Second, "the first member takes the partitions back", func() bool { _, _, _, a := c1.get(); return a > assigned })
	<-feeding
	testenv.Eventually(t, 60*time.Second, "every output read", func() bool { return committed.outputs() >= total*per })
	exactlyOnce(t, finish(t, addr, out, 2, committed), total, per)
}

// A revoke that comes while no transaction is open aborts nothing: the
// member that gave partitions up commits its next transaction.
func TestRevokeBetweenTransactionsAbortsNothing(t *testing.T) {
	addr := brokerAddr(t)
	in, out, group := names(t)
	createTopic(t, addr, in, 4)
	createTopic(t, addr, out, 1)
	committed := newReader(t, addr, out, true)
	produceInputs(t, addr, in, 0, 100)
	c1, c2 := &counter{}, &counter{}
	start(t, addr, group, in, group+"-1", fanOut(out, 1), franztxn.WithHooks(c1))
	testenv.Eventually(t, 30*time.Second, "the first outputs read", func() bool { return committed.outputs() >= 100 })

	// The member is idle, waiting for records, when it gives partitions
	// up.
	start(t, addr, group, in, group+"-2", fanOut(out, 1), franztxn.WithHooks(c2))
	testenv.Eventually(t, 30*time.Second, "the rebalance done", func() bool {
		_, _, _, a := c2.get()
		return c1.rejoined() && a >= 1
	})
	before, _, _, _ := c1.get()
	produceInputs(t, addr, in, 100, 300)
	testenv.Eventually(t, 60*time.Second, "every output read", func() bool { return committed.outputs() >= 300 })
	exactlyOnce(t, finish(t, addr, out, 1, committed), 300, 1)
	after, aborted, _, _ := c1.get()
	if after == before || aborted != 0 {
		t.Fatalf("after the revoke the first member committed %d transactions and aborted %d (last: %v), want some and none", after-before, aborted, c1.lastErr)
	}
}
