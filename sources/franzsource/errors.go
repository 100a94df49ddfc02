package franzsource

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/internal/kafkacore"
)

// Errors of the franz source. Test with errors.Is; a franz-go error, when
// there is one, stays reachable with errors.As. They mean what the errors
// of the same names in sources/kafkasource mean.
var (
	// ErrInvalidConfig wraps every configuration error New returns. It is
	// the ErrInvalidConfig of every onceq package: errors.Is with any of
	// them matches.
	ErrInvalidConfig = configerr.ErrInvalidConfig
	// ErrUnknownTopic: a topic given to New, or the dead-letter topic, does
	// not exist on the cluster.
	ErrUnknownTopic = errors.New("franzsource: unknown topic")
	// ErrNoDeadLetterTopic: DeadLetter without a DeadLetterTopic; the
	// message stays unsettled. It wraps [broker.ErrNoDeadLetterDestination].
	ErrNoDeadLetterTopic = fmt.Errorf("franzsource: no dead-letter topic configured: %w", broker.ErrNoDeadLetterDestination)
	// ErrDeadLetterFailed: producing the dead-letter record failed; the
	// message stays unsettled.
	ErrDeadLetterFailed = errors.New("franzsource: producing the dead-letter record failed")
	// ErrCommitFailed: committing offsets failed; what was not committed
	// is read again by the partition's next owner and answered by dedup.
	ErrCommitFailed = errors.New("franzsource: committing offsets failed")
	// ErrNotInFlight: the message was settled already, or given back.
	ErrNotInFlight = errors.New("franzsource: message not in flight")
	// ErrForeignMessage: the message was not delivered by this source.
	ErrForeignMessage = errors.New("franzsource: message not delivered by this source")
)

func invalidOption(format string, args ...any) error {
	return fmt.Errorf("franzsource: %w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// groupMovedOn reports whether every failure in err is the group refusing
// a commit because this member, or its generation, is no longer part of
// it: a member the group dropped, a rebalance under way or done (this
// member still rejoining when the commit's time ran out), a stale member
// epoch (KIP-848).
func groupMovedOn(err error) bool {
	return kafkacore.GroupMovedOn(err, ErrCommitFailed,
		kerr.UnknownMemberID, kerr.RebalanceInProgress, kerr.IllegalGeneration, kerr.StaleMemberEpoch, kerr.FencedMemberEpoch, errRejoining)
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
