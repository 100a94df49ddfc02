package kafkacore

import (
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq/outbox"
)

// A topic name Kafka allows passes; any other is refused before a client
// sees it.
func TestRefusalOfTopicNames(t *testing.T) {
	for _, ok := range []string{"orders", "a.b_c-D9", strings.Repeat("t", maxTopicLen), "..."} {
		if err := Refusal(&outbox.Entry{Message: outbox.Message{Destination: ok}}); err != nil {
			t.Errorf("topic %q: %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "or ders", "tópico", "a/b", strings.Repeat("t", maxTopicLen+1), "a\nb"} {
		if err := Refusal(&outbox.Entry{Message: outbox.Message{Destination: bad}}); !errors.Is(err, outbox.ErrRefused) {
			t.Errorf("topic %q: %v, want an *outbox.RefusedError", bad, err)
		}
	}
}
