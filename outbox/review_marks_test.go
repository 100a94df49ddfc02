package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/outbox"
)

// partlyLost is a store whose Dispatched finds one lease lost and fails
// to mark the others (a throttle): the joined error a DynamoDB or
// PostgreSQL outbox returns for such a batch of marks.
type partlyLost struct{ outbox.Store }

func (p partlyLost) Dispatched(_ context.Context, leases []outbox.Lease, _, _ time.Time) error {
	errs := []error{fmt.Errorf("entry 0: %w", outbox.ErrLeaseLost)}
	for range leases[1:] {
		errs = append(errs, errors.New("ThrottlingException: rate exceeded"))
	}
	return errors.Join(errs...)
}

// A mark that failed for some entries (not their lease lost) is an error
// of the pass, even when another entry's lease was lost: those entries
// were sent but are not marked, and are sent again.
func TestReviewPartlyFailedMarkIsReported(t *testing.T) {
	s, ob := newStore(t)
	commit(t, s, "test#marks", outbox.Message{Destination: "q", Body: []byte("a")}, outbox.Message{Destination: "q", Body: []byte("b")},
		outbox.Message{Destination: "q", Body: []byte("c")})
	r, err := outbox.NewRelay(partlyLost{ob}, &recordingSender{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := r.Pass(t.Context())
	if n != 3 || err == nil || !strings.Contains(err.Error(), "ThrottlingException") {
		t.Fatalf("Pass: %d entries, error %v; want 3 and the throttled marks reported", n, err)
	}
}
