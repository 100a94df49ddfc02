package consumer

import "github.com/onceq/onceq/broker"

// The broker seam, re-exported so that a handler needs only this package.
// Source adapters implement [broker.Source]; see package broker.
type (
	// Source is the seam to a broker (an alias of [broker.Source]): it
	// delivers messages with Receive, and for each one the consumer calls
	// exactly one of Ack, Nack or DeadLetter, and may call Extend while it
	// is held. Check verifies the queue or topic before the first receive;
	// Capabilities declares what the Source promises (ordering, delivery
	// timeout, redelivery window, a dead-letter destination, a default
	// key); Attach hands it the consumer's logger, commit-hold bound and
	// throttle observer; Close stops receiving and leaves unsettled
	// messages with the broker. A Source must be safe for concurrent use.
	// The SQS, Kafka and in-process sources implement it.
	Source = broker.Source
	// Capabilities is what a Source declares about itself, in one value
	// (an alias of [broker.Capabilities]): its Ordering, its
	// DeliveryTimeout (the consumer extends deliveries before it passes),
	// its RedeliveryWindow (records are kept longer than it), whether it
	// has a DeadLetter destination, whether settled messages stay
	// Replayable from the broker (Kafka), and its DefaultKey (KeyFromBody
	// or KeyFromRecord). It is data: what the Source needs from the
	// consumer (a logger, the commit-hold bound, a throttle observer) is
	// handed over in one Source.Attach call instead (broker.Runtime).
	// A wrapper that forwards Capabilities keeps every guarantee of the
	// Source it wraps. The zero value is an unordered source whose
	// deliveries never time out, with no dead-letter destination.
	Capabilities = broker.Capabilities
	// Message is one delivery from a Source (an alias of
	// [broker.Message]). Its fields:
	//
	//   - ID: the broker's message ID (SQS MessageId, Kafka
	//     topic/partition/offset).
	//   - OrderingKey: what orders messages (SQS MessageGroupId, Kafka
	//     record key); not the idempotency key.
	//   - Body, Attributes: the payload, and the SQS message attributes or
	//     Kafka headers.
	//   - Deliveries: how often the message was delivered, from 1
	//     (Outcome.Attempt is the handler's attempt number instead).
	//   - Origin: the queue, or topic, partition and offset.
	//   - ReceivedAt: when the source received it.
	//   - IdempotencyKey: the key the consumer claimed, set before the
	//     handler runs; pass it to outside systems as their idempotency key.
	//   - Handle: the source's own delivery state; the consumer never looks
	//     at it.
	Message = broker.Message
	// Origin says where a message came from: System ("aws_sqs", "kafka",
	// "memory"), Destination (queue or topic), and for Kafka its Partition
	// and Offset. An alias of [broker.Origin].
	Origin = broker.Origin
	// Ordering is the order a Source promises: Unordered, OrderByKey (one
	// OrderingKey at a time: SQS FIFO message groups, Kafka key mode) or
	// OrderByPartition (one Kafka partition at a time). The consumer keeps
	// it: a message's successor waits while it is retried in place. An
	// alias of [broker.Ordering].
	Ordering = broker.Ordering
	// KeyFunc returns a message's idempotency key, before the namespace is
	// put in front; an error or an empty key dead-letters the message. An
	// alias of [broker.KeyFunc]; see WithKeyFunc.
	KeyFunc = broker.KeyFunc
	// KeyScheme is how a Source's messages are keyed by default, as its
	// Capabilities declare: KeyFromBody or KeyFromRecord. An alias of
	// [broker.KeyScheme].
	KeyScheme = broker.KeyScheme
)

// The default keys a Source may declare; see [broker.KeyScheme].
const (
	KeyFromBody   = broker.KeyFromBody
	KeyFromRecord = broker.KeyFromRecord
)

// The orderings a Source may declare; see [broker.Ordering].
const (
	Unordered        = broker.Unordered
	OrderByKey       = broker.OrderByKey
	OrderByPartition = broker.OrderByPartition
)

// IdempotencyKeyAttribute, "idempotency-key", is the message attribute
// (SQS) or record header (Kafka) whose value is the idempotency key when
// one is set: [broker.IdempotencyKeyAttribute].
const IdempotencyKeyAttribute = broker.IdempotencyKeyAttribute
