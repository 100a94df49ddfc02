package storetest

import (
	"reflect"
	"testing"

	"github.com/onceq/onceq/dedup"
)

// nonsenseWrite is a business write of no Store: every Store refuses it
// with dedup.ErrUnsupportedWrite.
type nonsenseWrite struct{ Nonsense int }

func (nonsenseWrite) WriteKind() dedup.WriteKind { return "storetest-nonsense" }

// declaredWrites: the write kind a Store declares (Capabilities.Writes) is
// the kind of the writes it commits, since a Guard refuses every other
// kind before the Store sees it: each of the Store's own nil writes
// (Options.NilWrites) is of the declared kind; a kind of no Store is not
// declared.
func (s *suite) declaredWrites(t *testing.T, st dedup.Store) {
	declared := st.Capabilities().Writes
	if declared == (nonsenseWrite{}).WriteKind() {
		t.Fatalf("Capabilities.Writes %q declares a kind of no Store", declared)
	}
	for _, w := range s.opts.NilWrites {
		if k := kindOf(w); k != declared {
			t.Fatalf("the Store's write type %T is of kind %q, not its Capabilities.Writes %q: a Guard would refuse it", w, k, declared)
		}
	}
}

// kindOf is w's kind, for a nil pointer that of the value it points to.
func kindOf(w dedup.Write) dedup.WriteKind {
	if v := reflect.ValueOf(w); v.Kind() == reflect.Pointer && v.IsNil() {
		return reflect.New(v.Type().Elem()).Elem().Interface().(dedup.Write).WriteKind()
	}
	return w.WriteKind()
}
