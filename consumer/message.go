package consumer

import "time"

// IdempotencyKeyAttribute is the message attribute (SQS) or header (Kafka)
// whose value, when present, is the message's idempotency key.
const IdempotencyKeyAttribute = "idempotency-key"

// Message is one delivery from a Source.
type Message struct {
	// ID is the broker's message ID (SQS MessageId, Kafka topic/partition/offset).
	ID string
	// Key orders messages (SQS MessageGroupId, Kafka record key).
	Key string
	// Body is the payload.
	Body []byte
	// Attributes are SQS message attributes or Kafka headers.
	Attributes map[string]string
	// Attempt counts deliveries of this message, from 1.
	Attempt int
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
