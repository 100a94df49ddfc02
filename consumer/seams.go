package consumer

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
)

// The Store and the Source are code the consumer did not write: a panic in
// one of their calls must not end the worker process (taking every other
// message's work with it), nor be blamed on the message being processed.
// The consumer calls them through these wrappers, which turn a panic into
// a *PanicError, a fault of the deployment, and log its stack.

// recovered turns a panic of seam's call into *err, logged with its stack.
// Deferred directly, so that recover sees the panic.
func recovered(l *slog.Logger, seam, call string, err *error) {
	p := recover()
	if p == nil {
		return
	}
	*err = &PanicError{Seam: seam, Call: call, Value: p}
	l.Error(seam+" call panicked; a fault of the deployment, no message is blamed",
		slog.String("call", call), slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
}

// safeStore is the Store as the consumer calls it. It embeds nothing, so
// that no call reaches the Store unguarded.
type safeStore struct {
	s   dedup.Store
	log *slog.Logger
}

func (w safeStore) Check(ctx context.Context) (err error) {
	defer recovered(w.log, "store", "Check", &err)
	return w.s.Check(ctx)
}

func (w safeStore) Claim(ctx context.Context, req dedup.ClaimRequest) (c dedup.Claim, err error) {
	defer recovered(w.log, "store", "Claim", &err)
	return w.s.Claim(ctx, req)
}

func (w safeStore) Complete(ctx context.Context, req dedup.CompleteRequest) (err error) {
	defer recovered(w.log, "store", "Complete", &err)
	return w.s.Complete(ctx, req)
}

func (w safeStore) Fail(ctx context.Context, req dedup.FailRequest) (err error) {
	defer recovered(w.log, "store", "Fail", &err)
	return w.s.Fail(ctx, req)
}

func (w safeStore) Extend(ctx context.Context, req dedup.ExtendRequest) (err error) {
	defer recovered(w.log, "store", "Extend", &err)
	return w.s.Extend(ctx, req)
}

func (w safeStore) Get(ctx context.Context, key string) (r dedup.Record, err error) {
	defer recovered(w.log, "store", "Get", &err)
	return w.s.Get(ctx, key)
}

func (w safeStore) ClaimComplete(ctx context.Context, req dedup.ClaimCompleteRequest) (c dedup.Claim, err error) {
	defer recovered(w.log, "store", "ClaimComplete", &err)
	return w.s.ClaimComplete(ctx, req)
}

// Capabilities is read once, by NewGuard (see capabilities).
func (w safeStore) Capabilities() dedup.Capabilities { return w.s.Capabilities() }

// Attach is called once, by NewGuard, under attach.
func (w safeStore) Attach(rt dedup.Runtime) { w.s.Attach(rt) }

// capabilities reads a Store's or Source's Capabilities at construction,
// a panic there being an error of the configuration.
func capabilities[C any](seam string, f func() C) (c C, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = configError("the %s's Capabilities panicked: %v", seam, p)
		}
	}()
	return f(), nil
}

// attach runs a Store's or Source's Attach at construction, a panic there
// being an error of the configuration.
func attach(seam string, f func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = configError("the %s's Attach panicked: %v", seam, p)
		}
	}()
	f()
	return nil
}

// safeSource is the Source as the consumer calls it.
type safeSource struct {
	s   Source
	log *slog.Logger
}

func (w safeSource) Capabilities() Capabilities { return w.s.Capabilities() }

// Attach is called once, by New, under attach.
func (w safeSource) Attach(rt broker.Runtime) { w.s.Attach(rt) }

func (w safeSource) Check(ctx context.Context) (err error) {
	defer recovered(w.log, "source", "Check", &err)
	return w.s.Check(ctx)
}

func (w safeSource) Receive(ctx context.Context, max int) (ms []*Message, err error) {
	defer recovered(w.log, "source", "Receive", &err)
	return w.s.Receive(ctx, max)
}

func (w safeSource) Ack(ctx context.Context, m *Message) (err error) {
	defer recovered(w.log, "source", "Ack", &err)
	return w.s.Ack(ctx, m)
}

func (w safeSource) Nack(ctx context.Context, m *Message, delay time.Duration) (err error) {
	defer recovered(w.log, "source", "Nack", &err)
	return w.s.Nack(ctx, m, delay)
}

func (w safeSource) DeadLetter(ctx context.Context, m *Message, reason string) (err error) {
	defer recovered(w.log, "source", "DeadLetter", &err)
	return w.s.DeadLetter(ctx, m, reason)
}

func (w safeSource) Extend(ctx context.Context, m *Message, d time.Duration) (err error) {
	defer recovered(w.log, "source", "Extend", &err)
	return w.s.Extend(ctx, m, d)
}

func (w safeSource) Close(ctx context.Context) (err error) {
	defer recovered(w.log, "source", "Close", &err)
	return w.s.Close(ctx)
}
