package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/onceq/onceq/outbox"
)

// lazyView is a Store's outbox view left unset: the Store's Capabilities
// hand over a nil *lazyView (a field never filled), a non-nil
// outbox.Store whose every method dereferences nothing.
type lazyView struct{ n int }

func (v *lazyView) Check(context.Context) error { return fmt.Errorf("%d", v.n) }
func (v *lazyView) Lease(context.Context, outbox.LeaseRequest) ([]outbox.Entry, error) {
	return nil, fmt.Errorf("%d", v.n)
}
func (v *lazyView) Dispatched(context.Context, []outbox.Lease, time.Time, time.Time) error {
	return fmt.Errorf("%d", v.n)
}
func (v *lazyView) Retry(context.Context, outbox.Lease, string, time.Time, time.Time) error {
	return fmt.Errorf("%d", v.n)
}
func (v *lazyView) Release(context.Context, outbox.Lease, string, time.Time, time.Time) error {
	return fmt.Errorf("%d", v.n)
}
func (v *lazyView) Dead(context.Context, outbox.Lease, string, time.Time, time.Time) error {
	return fmt.Errorf("%d", v.n)
}
func (v *lazyView) Entries(context.Context, outbox.State, int) ([]outbox.Entry, error) {
	return nil, fmt.Errorf("%d", v.n)
}
func (v *lazyView) EntriesPage(context.Context, outbox.State, string, int) ([]outbox.Entry, string, error) {
	return nil, "", fmt.Errorf("%d", v.n)
}
func (v *lazyView) Requeue(context.Context, outbox.Entry, string, time.Time) error {
	return fmt.Errorf("%d", v.n)
}

// A nil view behind a non-nil interface is refused at NewRelay, as a nil
// one is, instead of crashing the process at the relay's first pass.
func TestReviewRelayRefusesNilPointerView(t *testing.T) {
	var view *lazyView
	var s outbox.Store = view
	r, err := outbox.NewRelay(s, shortSender{})
	if err == nil {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("NewRelay took a nil *lazyView and Run panicked: %v", p)
				}
			}()
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			err = r.Run(ctx)
		}()
	}
	if !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("a nil view: %v, want ErrInvalidConfig", err)
	}
}
