package consumer

import (
	"reflect"

	"github.com/onceq/onceq/dedup"
)

// writeKind is the kind of business write a Guard's Store declares
// (dedup.Capabilities.Writes). A handler's write of another kind was
// written for another Store: the deployment's fault, which every message
// would meet, so it is refused before the Store is called, and the
// message is given back rather than dead-lettered (see WriteTypeError).
type writeKind struct {
	store string // the Store's type, for the error
	kind  dedup.WriteKind
}

// check returns a *WriteTypeError for the first write of a kind the Store
// does not declare: one method call per write, no reflection. A nil write
// is left to the Store, which refuses it as the message's fault
// (dedup.ErrNilWrite).
func (w writeKind) check(writes []dedup.Write) error {
	for i, wr := range writes {
		k, nilPtr := kindOf(wr)
		if nilPtr {
			continue
		}
		if k != w.kind || k == "" {
			return &WriteTypeError{Store: w.store, Index: i, Type: reflect.TypeOf(wr), Kind: k, Takes: w.kind}
		}
	}
	return nil
}

// kindOf is w's kind; nil says w is nil or a nil pointer (a nil
// *memstore.Write), whose value-receiver WriteKind cannot run: the Store
// refuses it as a nil write, the message's fault, not the deployment's.
func kindOf(w dedup.Write) (k dedup.WriteKind, isNil bool) {
	if w == nil {
		return "", true
	}
	defer func() {
		if recover() != nil {
			isNil = true
		}
	}()
	return w.WriteKind(), false
}
