package cache_test

import (
	"context"
	"fmt"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
)

// A Guard or a Consumer puts the cache in front of its Store (see the
// consumer's CompletedCache and WithoutCompletedCache options); Guard.CacheStats
// reads its counters. Here an order arrives four times: the first claim
// misses and goes to the store, and the three copies after it are answered
// from this process's memory with the cached response.
func ExampleStats() {
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: []byte("accepted")}, nil
	})
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	guard, err := consumer.NewGuard(store, h, consumer.CompletedCache(1_000, 1<<20))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := range 4 {
		o := guard.Process(ctx, &consumer.Message{ID: fmt.Sprint("m-", i), Body: []byte(`{"order_id":"o-1"}`)})
		fmt.Println(o.Kind, string(o.Response))
	}
	stats, ok := guard.CacheStats()
	fmt.Println("cache on:", ok)
	fmt.Printf("hits %d, misses %d, entries %d\n", stats.Hits, stats.Misses, stats.Entries)
	// Output:
	// processed accepted
	// duplicate accepted
	// duplicate accepted
	// duplicate accepted
	// cache on: true
	// hits 3, misses 1, entries 1
}
