package consumer

import (
	"time"

	"github.com/onceq/onceq/broker"
)

// ReceivesNeeded is the lowest number of receives of one message that lets
// a worker spend all of maxAttempts before a broker's own redelivery
// limit moves it on: broker.ReceivesNeeded, which sources check their
// limits against without importing the consumer.
func ReceivesNeeded(maxAttempts int, leaseTTL, visibility time.Duration) int {
	return broker.ReceivesNeeded(maxAttempts, leaseTTL, visibility)
}
