// Package configerr holds onceq's one configuration error. Every package
// that refuses a configuration re-exports it as ErrInvalidConfig, so
// errors.Is(err, consumer.ErrInvalidConfig) and errors.Is(err,
// sqssource.ErrInvalidConfig) are one test, whichever package refused.
package configerr

import "errors"

// ErrInvalidConfig wraps every configuration error of onceq. The wrapping
// error names the package and what is wrong.
var ErrInvalidConfig = errors.New("invalid configuration")
