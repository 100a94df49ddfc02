package outbox_test

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/retry"
)

// What no destination takes is refused, named by its place, as the
// handler's fault; anything a destination of some kind may take passes.
func TestCheckMessages(t *testing.T) {
	for _, d := range []string{"orders", "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo", "tópico", "a b"} {
		if err := outbox.CheckMessages([]outbox.Message{{Destination: d}}); err != nil {
			t.Errorf("destination %q: %v, want nil", d, err)
		}
	}
	for _, d := range []string{"", "orders\n", "or\x00ders", "\x7f", "or\u0085ders", string([]byte{0xff})} {
		err := outbox.CheckMessages([]outbox.Message{{Destination: "orders"}, {Destination: d}})
		var ue *outbox.UndeliverableError
		if !errors.Is(err, outbox.ErrUndeliverable) || !errors.As(err, &ue) || ue.Index != 1 || retry.Classify(err) != retry.Permanent {
			t.Errorf("destination %q: %v, want an *UndeliverableError for message 1, retry class Permanent", d, err)
			continue
		}
		if msg := err.Error(); hasControl(msg) || !strings.Contains(msg, "handler") {
			t.Errorf("destination %q: error text %q holds a control character or does not blame the handler", d, msg)
		}
		refused := outbox.Refusal(&outbox.Entry{Message: outbox.Message{Destination: d}})
		if !errors.Is(refused, outbox.ErrRefused) || hasControl(refused.Error()) {
			t.Errorf("destination %q: Refusal %v, want an *outbox.RefusedError with no control character in its text", d, refused)
		}
	}
}

func hasControl(s string) bool {
	return !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl)
}
