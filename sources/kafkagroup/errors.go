package kafkagroup

import (
	"errors"
	"fmt"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/retry"
)

// Errors of the Kafka sources, the same values whichever source returned
// them. Test with errors.Is; the client's own error, when there is one,
// stays reachable with errors.As.
var (
	// ErrInvalidConfig wraps every configuration error New returns. It is
	// the ErrInvalidConfig of every onceq package: errors.Is with any of
	// them matches.
	ErrInvalidConfig = configerr.ErrInvalidConfig
	// ErrUnknownTopic: a topic given to New (or the dead-letter topic) does
	// not exist on the cluster.
	ErrUnknownTopic = errors.New("kafka: unknown topic")
	// ErrNoDeadLetterTopic: DeadLetter was called but the source has no
	// DeadLetterTopic. The message is left unsettled, its offset held. It
	// wraps [broker.ErrNoDeadLetterDestination], so callers that know no
	// Kafka can test for that.
	ErrNoDeadLetterTopic = fmt.Errorf("kafka: no dead-letter topic configured: %w", broker.ErrNoDeadLetterDestination)
	// ErrDeadLetterFailed: the dead-letter record could not be produced.
	// The message is left unsettled, its offset held.
	ErrDeadLetterFailed = errors.New("kafka: producing the dead-letter record failed")
	// ErrCommitFailed: committing offsets failed (Close reports it for the
	// final commit, unless the group had moved on). The uncommitted
	// messages are delivered again to the partition's next owner and the
	// dedup store answers them.
	ErrCommitFailed = errors.New("kafka: committing offsets failed")
	// ErrNotInFlight: the message is not out for delivery now: it was
	// settled already, or given back with Nack.
	ErrNotInFlight = errors.New("kafka: message not in flight")
	// ErrForeignMessage: the message was not delivered by this source.
	ErrForeignMessage = errors.New("kafka: message not delivered by this source")
)

// CommitHeldError is Receive's error once a partition's oldest unfinished
// record has held its commit past the bound the consumer gave (3/4 of its
// Retention): the records completed after it would expire before a replay
// from the held offset reached them, and run again. It stops the consumer
// as a deployment fault.
type CommitHeldError struct {
	// Topic, Partition and Offset name the record that holds the commit.
	Topic     string
	Partition int32
	Offset    int64
	// Held is how long it has held it.
	Held time.Duration
	// Limit is the bound it passed.
	Limit time.Duration
}

func (e *CommitHeldError) Error() string {
	return fmt.Sprintf("kafka: %s/%d: offset %d unfinished for %v, past %v (3/4 of the consumer's Retention): a replay from it would find later records' COMPLETED records expired and run them again; stopping instead. Find what holds the record (a stuck handler, a store outage) or raise Retention",
		e.Topic, e.Partition, e.Offset, e.Held.Round(time.Second), e.Limit)
}

// RetryClass makes the error stop the consumer, as a deployment fault.
func (e *CommitHeldError) RetryClass() retry.Class { return retry.Misconfigured }

// AddressError is New's error for a broker address that is not host:port
// (Kafka clients would quietly dial a default port instead). It wraps
// ErrInvalidConfig.
type AddressError struct {
	// Source is the package that refused it: kafkasource or franzsource.
	Source string
	// Address is the broker address as given.
	Address string
	// Reason says what is wrong with it.
	Reason string
}

func (e *AddressError) Error() string {
	return fmt.Sprintf("%s: %v: broker address %q: %s, want host:port", e.Source, ErrInvalidConfig, e.Address, e.Reason)
}

// Unwrap makes the error match ErrInvalidConfig.
func (e *AddressError) Unwrap() error { return ErrInvalidConfig }
