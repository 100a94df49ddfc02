// A key longer than the tenant layout's sort key (1,024 bytes) is stored
// as its hash: it is processed, and a duplicate is recognised (it once
// failed on every claim and was held as if DynamoDB were down).

package faultmatrix_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/dynamostore"
)

func init() {
	cases = append(cases, matrixCase{name: "long-key-tenant-layout", run: longKeyTenantLayout})
}

// A 1.5 KB idempotency key with the store in the tenant layout: processed
// once, and a duplicate sent afterwards is recognised as one.
func longKeyTenantLayout(t *testing.T, f *fixture) string {
	f.tables(dynamostore.NamespaceLayout())
	f.queues(0, true)
	key := "order-" + strings.Repeat("k", 1536-len("order-"))
	w := f.start("worker", f.store(dynamostore.NamespaceLayout()), f.handler(nil))
	f.send(key)
	f.waitEffects(t, 30*time.Second)
	f.send(key) // a duplicate delivery: a new message, the same key
	waitFor(t, 30*time.Second, func() string {
		if f.rec.count(consumer.Duplicate) == 0 {
			return fmt.Sprintf("the duplicate was not recognised (outcomes %s)", f.rec.kinds())
		}
		return ""
	})
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if p, n := f.rec.count(consumer.Processed), f.rec.runsOf(key); p != 1 || n != 1 {
		t.Fatalf("%d processed, %d handler runs; want 1 and 1", p, n)
	}
	return fmt.Sprintf("%d-byte key: %s", len(key), f.rec.kinds())
}
