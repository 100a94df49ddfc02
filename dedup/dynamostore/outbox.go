package dynamostore

import (
	"fmt"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/outbox"
)

// noOutbox refuses outgoing messages, which the Store does not commit (its
// Capabilities say no Outbox).
func noOutbox(msgs []outbox.Message) error {
	if len(msgs) > 0 {
		return fmt.Errorf("%w: %d outgoing messages (the store commits no outbox)", dedup.ErrUnsupportedWrite, len(msgs))
	}
	return nil
}
