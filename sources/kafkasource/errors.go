package kafkasource

import (
	"errors"
	"fmt"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/internal/kafkacore"
)

// Errors of the Kafka source. Test with errors.Is; a kafka-go error, when
// there is one, stays reachable with errors.As.
var (
	// ErrInvalidConfig wraps every configuration error New returns. It is
	// the ErrInvalidConfig of every onceq package: errors.Is with any of
	// them matches.
	ErrInvalidConfig = configerr.ErrInvalidConfig
	// ErrUnknownTopic: a topic given to New (or the dead-letter topic) does
	// not exist on the cluster.
	ErrUnknownTopic = errors.New("kafkasource: unknown topic")
	// ErrNoDeadLetterTopic: DeadLetter was called but the source has no
	// DeadLetterTopic. The message is left unsettled, its offset held. It
	// wraps [broker.ErrNoDeadLetterDestination], so callers that know no
	// Kafka can test for that.
	ErrNoDeadLetterTopic = fmt.Errorf("kafkasource: no dead-letter topic configured: %w", broker.ErrNoDeadLetterDestination)
	// ErrDeadLetterFailed: the dead-letter record could not be produced.
	// The message is left unsettled, its offset held.
	ErrDeadLetterFailed = errors.New("kafkasource: producing the dead-letter record failed")
	// ErrCommitFailed: committing offsets failed (Close reports it for the
	// final commit, unless the group had moved on). The uncommitted messages are delivered again to the
	// partition's next owner and the dedup store answers them.
	ErrCommitFailed = errors.New("kafkasource: committing offsets failed")
	// ErrNotInFlight: the message is not out for delivery now: it was
	// settled already, or given back with Nack.
	ErrNotInFlight = errors.New("kafkasource: message not in flight")
	// ErrForeignMessage: the message was not delivered by this source.
	ErrForeignMessage = errors.New("kafkasource: message not delivered by this source")
)

func invalidOption(format string, args ...any) error {
	return fmt.Errorf("kafkasource: %w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// groupMovedOn reports whether every failure in err is the group refusing
// a commit because this member, or its generation, is no longer part of
// it: a member the group dropped, a rebalance under way or done.
func groupMovedOn(err error) bool {
	return kafkacore.GroupMovedOn(err, ErrCommitFailed, kafkago.UnknownMemberId, kafkago.RebalanceInProgress, kafkago.IllegalGeneration)
}

// CommitHeldError is Receive's error once a partition's oldest unfinished
// record has held its commit past the bound the consumer gave
// (broker.Runtime.CommitHold): it stops the consumer. Its fields:
//
//   - Topic string, Partition int32, Offset int64: the record that holds
//     the commit.
//   - Held time.Duration: how long it has held it.
//   - Limit time.Duration: the bound it passed (3/4 of the consumer's
//     Retention).
//
// (An alias of a type both Kafka sources share; its fields are listed
// here because go doc does not follow it.)
type CommitHeldError = kafkacore.CommitHeldError

// AddressError is New's error for a broker address that is not host:port
// (no port, or one that is not a port number): Source names this package,
// Address the address as given, Reason what is wrong with it. It wraps
// ErrInvalidConfig. (An alias of a type both Kafka sources share.)
type AddressError = kafkacore.AddressError
