// Package configerr holds onceq's one configuration error. Every package
// that refuses a configuration re-exports it as ErrInvalidConfig, so
// errors.Is(err, consumer.ErrInvalidConfig) and errors.Is(err,
// sqssource.ErrInvalidConfig) are one test, whichever package refused.
package configerr

import (
	"errors"
	"reflect"
)

// ErrInvalidConfig wraps every configuration error of onceq. The wrapping
// error names the package and what is wrong.
var ErrInvalidConfig = errors.New("invalid configuration")

// NilValue reports a nil pointer or func held by a non-nil interface: a
// client whose constructor's error went unread, a view a Store never
// made, a nil HandlerFunc. A constructor refuses one as it refuses a nil
// interface, rather than crash at its first call.
func NilValue(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Func:
		return rv.IsNil()
	}
	return false
}
