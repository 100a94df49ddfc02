package broker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/onceq/onceq/retry"
)

// IdempotencyKeyAttribute is the message attribute (SQS) or header (Kafka)
// whose value, when present, is the message's idempotency key.
const IdempotencyKeyAttribute = "idempotency-key"

// Errors a Source returns. Test with errors.Is.
var (
	// ErrSourceClosed is returned by Receive once the Source is closed.
	ErrSourceClosed = errors.New("broker: source closed")
	// ErrNoDeadLetterDestination is returned by DeadLetter when the Source
	// has nowhere to put the message (Capabilities.DeadLetter is false);
	// the message is kept, not lost.
	ErrNoDeadLetterDestination = errors.New("broker: no dead-letter destination")
)

// Source is the seam to a broker. For each message it delivers, the
// consumer calls exactly one of Ack, Nack or DeadLetter, and may call
// Extend while the message is held. A Source must be safe for concurrent
// use.
type Source interface {
	// Capabilities declares what the Source promises. It is called once,
	// by consumer.New, and must not change.
	Capabilities() Capabilities
	// Attach hands the Source what it needs from the consumer that runs
	// it (see Runtime). consumer.New calls it once, before Check and the
	// first Receive. It is not called when the Source is read in a loop
	// of one's own (with a consumer.Guard): the Source then works with
	// what it was given at construction.
	Attach(rt Runtime)
	// Check verifies, before the first Receive, that the Source can work:
	// its queue or topic, and its dead-letter destination if it has one,
	// exist and can be reached. An error is a configuration fault: the
	// consumer does not start.
	Check(ctx context.Context) error
	// Receive blocks until at least one message is available, ctx is done,
	// or the Source is closed, and returns at most max messages. It
	// returns ErrSourceClosed once closed. The consumer calls it from one
	// goroutine for an ordered Source, and for an Unordered one from up to
	// one goroutine per core at once, each asking for its share of the
	// room left.
	Receive(ctx context.Context, max int) ([]*Message, error)
	// Ack settles a message whose record is COMPLETED. It may finish
	// asynchronously (batched); Close flushes what is pending.
	Ack(ctx context.Context, m *Message) error
	// Nack gives a message back to be delivered again after delay.
	Nack(ctx context.Context, m *Message, delay time.Duration) error
	// DeadLetter moves a message to the dead-letter destination with the
	// reason, then settles it. ErrNoDeadLetterDestination when there is
	// none; the message then stays with the broker.
	DeadLetter(ctx context.Context, m *Message, reason string) error
	// Extend keeps the message hidden from other consumers for d from now.
	// It is called only when Capabilities().DeliveryTimeout is positive.
	Extend(ctx context.Context, m *Message, d time.Duration) error
	// Close stops receiving, flushes pending acks and releases resources.
	// Messages not settled stay with the broker for redelivery.
	Close(ctx context.Context) error
}

// Capabilities is what a Source declares about itself: data only, read
// once. The zero value is an unordered source whose deliveries never time
// out, with no known redelivery window and the consumer's default key.
type Capabilities struct {
	// Ordering is the order the Source promises within a key.
	Ordering Ordering
	// DeliveryTimeout is how long a delivery stays hidden from other
	// consumers unless extended (SQS visibility). When positive the
	// consumer calls Extend well before it ends, for as long as it holds
	// the message; zero means deliveries never time out.
	DeliveryTimeout time.Duration
	// RedeliveryWindow is how long the broker may deliver a message again
	// (SQS retention). COMPLETED records must outlive it, or a late
	// redelivery would find no record and run again; the consumer raises
	// its default retention above it and refuses a shorter one.
	RedeliveryWindow time.Duration
	// DefaultKey is the Source's natural idempotency key, used unless the
	// user sets a key function: KeyFromBody (the zero value, the
	// consumer's default) or KeyFromRecord (Kafka).
	DefaultKey KeyScheme
	// DeadLetter reports that the Source has a dead-letter destination.
	// Without one a message that must be dead-lettered can only be kept
	// with the broker, so the consumer refuses such a Source unless told
	// to accept it.
	DeadLetter bool
	// Replayable reports that a settled message stays readable from the
	// broker (a Kafka log, until its retention). A message whose
	// dead-letter copy no destination took is then kept in the store
	// (DEAD_LETTER) and acked, so that it holds nothing up, and replayed
	// from there; otherwise it is given back to the broker's own redrive.
	Replayable bool
}

// Runtime is what the consumer that runs a Source hands it, in one
// Attach call before the first Receive.
type Runtime struct {
	// Logger is the consumer's logger (consumer.WithLogger), for the
	// Source to log to unless it was given a logger of its own. Nil when
	// the consumer was given none: every onceq component then logs to
	// slog.Default().
	Logger *slog.Logger
	// CommitHold bounds how long an unfinished message may hold back the
	// commit of those after it, for a Source where one does (Kafka): the
	// records of the later messages must outlive a replay from the held
	// one, or they would run again. Past it, Receive fails with an error
	// that stops the consumer (retry.Misconfigured). Zero: no bound. A
	// Source whose commits are never held ignores it.
	CommitHold time.Duration
	// Observe is told of each failure the Source retries itself, with its
	// class (give it to retry.Policy.Do): the consumer lowers its
	// concurrency on throttles. Never nil.
	Observe func(class retry.Class, err error)
	// Status is told how the broker answers the Source: each failure to
	// reach it or error it answers with, and its answers after a failure
	// (see Status). The consumer turns it into its readiness and into a
	// log line that names the broker while it fails. A Source with no
	// broker to fail (an in-process queue) never calls it. Never nil.
	Status func(Status)
}

// Status is one report of a Source about its broker, through
// Runtime.Status. A failure (Err set) lasts, for the consumer, until a
// report of the same Waiting without Err, or until Receive returns
// messages: a Source reports the answers that end a failure, and may
// report every answer (the consumer makes little of those while nothing
// fails).
type Status struct {
	// Broker is the address the Source waited on: host:port, a list of
	// them, or an endpoint URL. Never a credential.
	Broker string
	// Waiting is what the Source waited for from the broker, in a few
	// words ("fetch", "connection", "group join", "ReceiveMessage"). Each
	// Waiting is a failure of its own: an answer to one does not end a
	// failure of another.
	Waiting string
	// Err is why the broker could not be reached, or the error it
	// answered with; nil when it answered.
	Err error
}

// KeyScheme says how a Source's messages are keyed by default.
type KeyScheme int

const (
	// KeyFromBody is the consumer's default key: the
	// IdempotencyKeyAttribute when present, else the SHA-256 of the body.
	KeyFromBody KeyScheme = iota
	// KeyFromRecord is the IdempotencyKeyAttribute when present, else
	// Fingerprint: a hash of the Destination, the OrderingKey and the
	// body, which covers the body, so no second hash of it is stored.
	KeyFromRecord
)

var keySchemeNames = [...]string{"body", "record"}

func (k KeyScheme) String() string {
	if k >= 0 && int(k) < len(keySchemeNames) {
		return keySchemeNames[k]
	}
	return "unknown"
}

// KeyFunc returns a message's idempotency key (before the namespace is
// prefixed). An empty key dead-letters the message.
type KeyFunc func(m *Message) (string, error)

// Ordering is the order a source promises within a key.
type Ordering int

const (
	// Unordered: messages may be processed in any order and concurrently.
	Unordered Ordering = iota
	// OrderByKey: messages with the same Origin Destination, Partition and
	// OrderingKey are processed one at a time, in delivery order (SQS FIFO groups,
	// Kafka key mode).
	OrderByKey
	// OrderByPartition: messages of one Destination's Partition are
	// processed one at a time, in delivery order.
	OrderByPartition
)

var orderingNames = [...]string{"unordered", "by_key", "by_partition"}

func (o Ordering) String() string {
	if o >= 0 && int(o) < len(orderingNames) {
		return orderingNames[o]
	}
	return "unknown"
}

// Message is one delivery from a Source.
type Message struct {
	// ID is the broker's message ID (SQS MessageId, Kafka topic/partition/offset).
	ID string
	// OrderingKey orders messages (SQS MessageGroupId, Kafka record key).
	// It is not the idempotency key: that is IdempotencyKey, below.
	OrderingKey string
	// Body is the payload.
	Body []byte
	// Attributes are SQS message attributes or Kafka headers.
	Attributes map[string]string
	// Deliveries counts deliveries of this message, from 1: the broker's
	// count (SQS ApproximateReceiveCount) or the source's own, plus the
	// times the consumer held it in place for a retry. It is not the
	// handler's attempt number, which the store counts (Outcome.Attempt).
	Deliveries int
	// Origin names the queue, or topic, partition and offset.
	Origin Origin
	// ReceivedAt is when the source received it.
	ReceivedAt time.Time

	// IdempotencyKey is the fingerprint the consumer claimed for this
	// message, set before the handler runs. Pass it to outside systems as
	// their idempotency key: it is what makes a call that may run twice
	// (after a lease takeover) safe downstream.
	IdempotencyKey string

	// Handle is the source's own delivery state (a receipt handle, a
	// generation); the consumer never looks at it.
	Handle any
}

// Origin says where a message came from.
type Origin struct {
	System      string // "aws_sqs", "kafka", "memory"
	Destination string // queue name or URL, or topic
	Partition   int32  // Kafka partition; 0 elsewhere
	Offset      int64  // Kafka offset; 0 elsewhere
}
