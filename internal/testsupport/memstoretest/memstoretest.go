// Package memstoretest opens memory stores for tests: New fails the test
// where memstore.New returns an error, so that a test that needs a store
// takes one in an expression.
package memstoretest

import (
	"testing"

	"github.com/onceq/onceq/dedup/memstore"
)

// New returns memstore.New(opts...), failing t on its error.
func New(t testing.TB, opts ...memstore.Option) *memstore.Store {
	t.Helper()
	s, err := memstore.New(opts...)
	if err != nil {
		t.Fatalf("memstore.New: %v", err)
	}
	return s
}
