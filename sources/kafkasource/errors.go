package kafkasource

import (
	"fmt"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/sources/internal/kafkacore"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// The errors this source returns are package kafkagroup's, the same values
// for both Kafka sources.

// invalidOption is New's error for a setting only this source takes: it
// wraps kafkagroup.ErrInvalidConfig.
func invalidOption(format string, args ...any) error {
	return fmt.Errorf("kafkasource: %w: %s", kafkagroup.ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// groupMovedOn reports whether every failure in err is the group refusing
// a commit because this member, or its generation, is no longer part of
// it: a member the group dropped, a rebalance under way or done.
func groupMovedOn(err error) bool {
	return kafkacore.GroupMovedOn(err, kafkago.UnknownMemberId, kafkago.RebalanceInProgress, kafkago.IllegalGeneration)
}
