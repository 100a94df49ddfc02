// Package hookset is the one way onceq's packages take observer hooks, in
// the manner of franz-go's kgo: a hook is any value, and it is called for
// each hook interface of its package that it implements. A value that
// implements none is refused, so a misspelt method is a configuration error
// rather than silence.
//
// It imports nothing of onceq's; the packages that take hooks import it.
package hookset
