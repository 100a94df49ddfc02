// Package logref holds a component's logger under onceq's one logging rule:
// the logger the component was given (its WithLogger option), else the one
// the Consumer that runs it hands over (its Attach: broker.Runtime,
// dedup.Runtime), else slog.Default() as it is when each record is logged.
package logref

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
)

// Ref is a component's logger. Make it with New; do not copy it.
type Ref struct {
	given  bool
	target atomic.Pointer[slog.Logger]
}

// New returns a Ref for the logger given to a component; nil means none
// was given.
func New(given *slog.Logger) *Ref {
	r := &Ref{given: given != nil}
	if given != nil {
		r.target.Store(given)
	}
	return r
}

// Inherit makes l the logger, unless the component was given its own or l
// is nil.
// It may be called while the component logs.
func (r *Ref) Inherit(l *slog.Logger) {
	if !r.given && l != nil {
		r.target.Store(l)
	}
}

// Logger returns a logger that writes wherever r points when each record
// is logged, so one taken before Inherit follows it.
func (r *Ref) Logger() *slog.Logger { return slog.New(forward{r: r}) }

func (r *Ref) current() slog.Handler {
	if l := r.target.Load(); l != nil {
		return l.Handler()
	}
	return slog.Default().Handler()
}

// forward is a slog.Handler that resolves its destination per record;
// attributes and groups added with With are replayed onto it.
type forward struct {
	r   *Ref
	ops []func(slog.Handler) slog.Handler
}

func (f forward) handler() slog.Handler {
	h := f.r.current()
	for _, op := range f.ops {
		h = op(h)
	}
	return h
}

func (f forward) Enabled(ctx context.Context, l slog.Level) bool {
	return f.r.current().Enabled(ctx, l)
}

func (f forward) Handle(ctx context.Context, rec slog.Record) error {
	return f.handler().Handle(ctx, rec)
}

func (f forward) WithAttrs(as []slog.Attr) slog.Handler {
	return forward{r: f.r, ops: append(slices.Clip(f.ops), func(h slog.Handler) slog.Handler { return h.WithAttrs(as) })}
}

func (f forward) WithGroup(name string) slog.Handler {
	return forward{r: f.r, ops: append(slices.Clip(f.ops), func(h slog.Handler) slog.Handler { return h.WithGroup(name) })}
}
