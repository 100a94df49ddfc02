package franztxn

import (
	"errors"
	"fmt"

	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// Errors of a Processor. Test with errors.Is; the record a *RecordError
// names is reachable with errors.As.
var (
	// ErrInvalidConfig wraps every configuration error New returns. It is
	// the ErrInvalidConfig of every onceq package.
	ErrInvalidConfig = configerr.ErrInvalidConfig
	// ErrWritesUnsupported: a handler returned a Result with Writes. In
	// this mode no store commits them: only the records of Result.Outbox
	// and the consumed offsets commit, in one Kafka transaction.
	ErrWritesUnsupported = errors.New("franztxn: Result.Writes returned, but no store commits them in the Kafka-transactions mode")
	// ErrUnknownTopic: an input topic, or an output's Destination, does
	// not exist on the cluster (an empty Destination included). It is
	// package kafkagroup's.
	ErrUnknownTopic = kafkagroup.ErrUnknownTopic
	// ErrFenced: another producer took over this Processor's
	// transactional ID (a second instance with the same ID, or this one
	// restarted while a stalled copy still ran). The stalled copy's open
	// transaction is aborted by the broker and it commits nothing; Run
	// returns this error, since the ID is no longer its own.
	ErrFenced = errors.New("franztxn: the transactional ID was taken over by another producer")
	// ErrTransaction: ending a transaction failed in a way the client
	// cannot recover from (not a fencing, which is ErrFenced). Nothing of
	// the transaction is committed; the next owner of the partitions reads
	// its records again.
	ErrTransaction = errors.New("franztxn: ending the transaction failed")
)

// RecordError names the input record whose handling stopped Run: a
// handler's permanent error (consumer.Permanent), a misuse
// (ErrWritesUnsupported, ErrUnknownTopic), or an output the topic refused
// for good (an *outbox.RefusedError, errors.Is outbox.ErrRefused: larger
// than the topic's max.message.bytes). Its transaction was aborted and
// the record's offset is not committed: after a fix, the group reads it
// again.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("franztxn: record %s/%d/%d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

func invalidOption(format string, args ...any) error {
	return fmt.Errorf("franztxn: %w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}
