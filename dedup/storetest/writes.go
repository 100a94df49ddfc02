package storetest

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/onceq/onceq/dedup"
)

// declaredWrites: the write types a Store declares (Capabilities.Writes)
// are the ones it commits, since a Guard refuses every other type before
// the Store sees it. Each declared type that can be nil is known to
// Complete: its nil is refused as a nil write, not as an unknown type;
// each of the Store's own nil writes (Options.NilWrites) is of a declared
// type; a type of no Store is not declared.
func (s *suite) declaredWrites(t *testing.T, st dedup.Store) {
	declared := st.Capabilities().Writes
	if slices.Contains(declared, nil) {
		t.Fatalf("Capabilities.Writes %v holds a nil type", declared)
	}
	if slices.Contains(declared, reflect.TypeFor[struct{ Nonsense int }]()) {
		t.Fatalf("Capabilities.Writes %v declares a type of no Store", declared)
	}
	for _, w := range s.opts.NilWrites {
		if !slices.Contains(declared, reflect.TypeOf(w)) {
			t.Fatalf("the Store's write type %T is not in its Capabilities.Writes %v: a Guard would refuse it", w, declared)
		}
	}
	for _, typ := range declared {
		switch typ.Kind() {
		case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface:
		default:
			continue
		}
		k := key(t)
		l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
		err := st.Complete(ctx(t), dedup.CompleteRequest{Lease: l, Response: []byte("x"), Now: at(1), ExpiresAt: at(3600),
			Writes: []any{reflect.Zero(typ).Interface()}})
		if !errors.Is(err, dedup.ErrNilWrite) {
			t.Fatalf("Complete with a nil %v, a declared write type: %v, want dedup.ErrNilWrite", typ, err)
		}
	}
}
