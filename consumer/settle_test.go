package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"
)

// callLog is a Source that records each settle call it gets and answers
// DeadLetter with dlErr.
type callLog struct {
	Source
	calls []string
	dlErr error
}

func (s *callLog) Ack(context.Context, *Message) error {
	s.calls = append(s.calls, "ack")
	return nil
}

func (s *callLog) Nack(_ context.Context, _ *Message, d time.Duration) error {
	s.calls = append(s.calls, fmt.Sprintf("nack %v", d))
	return nil
}

func (s *callLog) DeadLetter(context.Context, *Message, string) error {
	s.calls = append(s.calls, "dead_letter")
	return s.dlErr
}

// The settle stage carries out a dead letter as the Guard's send under
// the lease left it: nothing more once sent; a copy kept in the store is
// released (acked where the broker keeps it readable, else given back for
// MaxRetryDelay); neither sent nor kept, given back; never sent (no lease
// was held), sent now, and given back when no destination takes it. A
// failure of the send under the lease is the settle's error.
func TestSettleStageDeadLetterFates(t *testing.T) {
	refused := errors.New("refused")
	cases := []struct {
		name       string
		sent       heldDeadLetter
		replayable bool
		dlErr      error
		want       string
		wantErr    error
	}{
		{"sent under the lease", heldDeadLetter{fate: deadLetterSent}, false, nil, "", nil},
		{"kept, replayable", heldDeadLetter{fate: deadLetterKept, err: refused}, true, nil, "ack", refused},
		{"kept", heldDeadLetter{fate: deadLetterKept, err: refused}, false, nil, "nack 1m0s", refused},
		{"neither sent nor kept", heldDeadLetter{fate: deadLetterFailed, err: refused}, false, nil, "nack 1m0s", refused},
		{"unsent", heldDeadLetter{}, false, nil, "dead_letter", nil},
		{"unsent, refused", heldDeadLetter{}, false, refused, "dead_letter,nack 1m0s", refused},
	}
	cfg := newConfig[GuardOption](nil)
	obs, err := newObserver(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := &callLog{dlErr: tc.dlErr}
			st := &settleStage{src: src, replayable: tc.replayable, keptDelay: time.Minute, log: slog.New(slog.DiscardHandler), obs: obs}
			o := Outcome{Kind: DeadLettered, Err: errors.New("poison")}
			err := st.settle(t.Context(), &Message{ID: "1"}, o, tc.sent)
			if got := strings.Join(src.calls, ","); got != tc.want {
				t.Errorf("source calls %q, want %q", got, tc.want)
			}
			if (tc.wantErr == nil) != (err == nil) || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Errorf("settle error %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// Outcome carries no unexported field: what the settle stage needs from
// the Guard is handed to it beside the Outcome, never inside it.
func TestOutcomeHasNoPrivateFields(t *testing.T) {
	ty := reflect.TypeFor[Outcome]()
	for f := range ty.Fields() {
		if !f.IsExported() {
			t.Errorf("Outcome.%s is unexported", f.Name)
		}
	}
}
