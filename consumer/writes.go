package consumer

import "reflect"

// writeTypes is the business write types a Guard's Store declares
// (dedup.Capabilities.Writes). A handler's write of another type was
// written for another Store: the deployment's fault, which every message
// would meet, so it is refused before the Store is called, and the
// message is given back rather than dead-lettered (see WriteTypeError).
type writeTypes struct {
	store string // the Store's type, for the error
	types []reflect.Type
}

// check returns a *WriteTypeError for the first write of a type the Store
// does not declare. A nil write is left to the Store, which refuses it as
// the message's fault (dedup.ErrNilWrite).
func (w writeTypes) check(writes []any) error {
	for i, wr := range writes {
		if wr == nil {
			continue
		}
		t := reflect.TypeOf(wr)
		if !w.takes(t) {
			return &WriteTypeError{Store: w.store, Index: i, Type: t, Takes: w.types}
		}
	}
	return nil
}

func (w writeTypes) takes(t reflect.Type) bool {
	for _, d := range w.types {
		if d == t {
			return true
		}
	}
	return false
}
