package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/redisstore"
	"github.com/onceq/onceq/internal/testsupport/sidebyside"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// BenchmarkRedis measures each store mode beside the minimal hand-written
// go-redis client doing the same job, 32 operations in flight
// (internal/testsupport/sidebyside: interleaved rounds, median ratios):
//
//   - ClaimThenComplete: SET key owner NX PXAT, then a script that sets
//     COMPLETED only while the owner still holds the key (2 calls a side);
//
//   - ClaimComplete: SET key COMPLETED NX PXAT (1 call a side).
//
// A hook on the client counts the calls per message, a script's EVALSHA
// and any EVAL fallback each.
//
//	go test -run '^$' -bench '^BenchmarkRedis$' ./dedup/redisstore/
func BenchmarkRedis(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b), PoolSize: 32})
	calls := &countingHook{}
	c.AddHook(calls)
	b.Cleanup(func() { _ = c.Close() })
	p := prefix()
	st := open(b, c, redisstore.Prefix(p))
	if err := st.Check(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { deletePrefix(c, p) })
	var seq atomic.Int64
	next := func() string { return "bench#" + strconv.FormatInt(seq.Add(1), 10) }
	now := time.Now()
	lease, keep := now.Add(time.Minute), now.Add(time.Hour)
	resp := []byte("ok")
	complete := redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3])
return 1`)
	onceq := func(ctx context.Context) error {
		k := next()
		cl, err := st.Claim(ctx, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: k, Now: now, LeaseUntil: lease})
		if err == nil && !cl.Acquired {
			err = fmt.Errorf("not acquired: %+v", cl)
		}
		if err != nil {
			return err
		}
		return st.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Response: resp, Now: now, ExpiresAt: keep})
	}
	minimal := func(ctx context.Context) error {
		k := next()
		name := p + "min:" + k
		ok, err := c.SetArgs(ctx, name, k, redis.SetArgs{Mode: "NX", ExpireAt: lease}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if ok != "OK" {
			return errors.New("not acquired")
		}
		n, err := complete.Run(ctx, c, []string{name}, k, "COMPLETED:ok", keep.UnixMilli()).Int()
		if err == nil && n != 1 {
			err = errors.New("lease lost")
		}
		return err
	}
	onceqOne := func(ctx context.Context) error {
		k := next()
		cl, err := st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h", Owner: k, Response: resp, Now: now, ExpiresAt: keep})
		if err == nil && !cl.Acquired {
			err = fmt.Errorf("not acquired: %+v", cl)
		}
		return err
	}
	minimalOne := func(ctx context.Context) error {
		k := next()
		ok, err := c.SetArgs(ctx, p+"min:"+k, "COMPLETED:ok", redis.SetArgs{Mode: "NX", ExpireAt: keep}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if ok != "OK" {
			return errors.New("not acquired")
		}
		return nil
	}
	o := sidebyside.Options{Calls: calls.n.Load}
	b.Run("ClaimThenComplete", func(b *testing.B) { sidebyside.Run(b, o, onceq, minimal) })
	b.Run("ClaimComplete", func(b *testing.B) { sidebyside.Run(b, o, onceqOne, minimalOne) })
}

func deletePrefix(c *redis.Client, p string) {
	ctx := context.Background()
	iter := c.Scan(ctx, 0, p+"*", 1000).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
}

// countingHook counts the commands the client sends, each a round trip.
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}
