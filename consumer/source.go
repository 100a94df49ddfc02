package consumer

import (
	"context"
	"time"
)

// Source is the seam to a broker, like database/sql/driver is to a
// database. For each message it delivers, the consumer calls exactly one of
// Ack, Nack or DeadLetter. A Source must be safe for concurrent use.
type Source interface {
	// Receive blocks until at least one message is available, ctx is done,
	// or the source is closed, and returns at most max messages. It
	// returns ErrSourceClosed once closed.
	Receive(ctx context.Context, max int) ([]*Message, error)
	// Ack settles a message whose record is COMPLETED. It may finish
	// asynchronously (batched); Close flushes what is pending.
	Ack(ctx context.Context, m *Message) error
	// Nack gives a message back to be delivered again after delay.
	Nack(ctx context.Context, m *Message, delay time.Duration) error
	// DeadLetter moves a message to the dead-letter destination with the
	// reason, then settles it.
	DeadLetter(ctx context.Context, m *Message, reason string) error
	// Close stops receiving, flushes pending acks and releases resources.
	// Messages not settled stay with the broker for redelivery.
	Close(ctx context.Context) error
}

// Extender is implemented by sources whose deliveries time out (SQS
// visibility); the consumer calls it while a handler runs long.
type Extender interface {
	// DeliveryTimeout is how long a delivery stays hidden from other
	// consumers unless extended; the consumer extends well before it ends.
	DeliveryTimeout() time.Duration
	// Extend keeps the message hidden from others for d from now.
	Extend(ctx context.Context, m *Message, d time.Duration) error
}

// Ordering is the order a source promises within a key.
type Ordering int

const (
	// Unordered: messages may be processed in any order and concurrently.
	Unordered Ordering = iota
	// OrderByKey: messages with the same Origin Destination, Partition and
	// Key are processed one at a time, in delivery order (SQS FIFO groups,
	// Kafka key mode).
	OrderByKey
	// OrderByPartition: messages of one Destination's Partition are
	// processed one at a time, in delivery order.
	OrderByPartition
)

// Orderer is implemented by sources that declare an Ordering. The consumer
// serializes accordingly; with any ordering, a message to be retried is
// retried in place (holding its key) rather than given back to the source,
// so that its successors cannot overtake it.
type Orderer interface {
	Ordering() Ordering
}

// KeySource is implemented by sources whose messages have a natural
// idempotency key other than the consumer's default (Kafka: topic, record
// key and value, since a producer retry gets a new offset). The consumer
// uses it unless WithKeyFunc was given.
type KeySource interface {
	DefaultKeyFunc() KeyFunc
}

// BodyKeySource is a KeySource whose default key, for the messages
// KeyCoversBody reports, is a hash over the whole body (Kafka's
// Fingerprint without an idempotency-key header). For them a second hash
// of the body, to detect a key reused for another payload, would say
// nothing the key does not, so the consumer skips it: the claim stores no
// payload hash and a stored one is not compared.
type BodyKeySource interface {
	KeySource
	KeyCoversBody(m *Message) bool
}

// Origin says where a message came from.
type Origin struct {
	System      string // "aws_sqs", "kafka", "memory"
	Destination string // queue name or URL, or topic
	Partition   int32  // Kafka partition; 0 elsewhere
	Offset      int64  // Kafka offset; 0 elsewhere
}
