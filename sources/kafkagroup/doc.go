// Package kafkagroup is what onceq's two Kafka sources have in common:
// the options both take, their errors, their hooks and the headers of
// their dead letters. sources/kafkasource reads through
// segmentio/kafka-go, sources/franzsource through franz-go; each is a thin
// adapter over one client, and this package imports neither.
//
// So a program names one value whichever client it runs on:
//
//	src, err := franzsource.New(ctx, brokers, "orders", []string{"orders"},
//		kafkagroup.DeadLetterTopic("orders-dlq"),
//		kafkagroup.WithHooks(observer),
//		franzsource.ClientID("orders-worker"))
//	if errors.Is(err, kafkagroup.ErrUnknownTopic) { ... }
//
// Each New takes its own package's Option: every option of this package
// is one (and [Options] makes a list of them one), beside the options of
// the source's own client (kafkasource.WithDialer, franzsource.TLS, ...),
// which are of that source's Option type alone: an option of the other
// client's source does not compile. An error means the same value
// whichever source returned it, and one observer serves either source. Both sources key a
// record alike (kafkasource.Fingerprint and franzsource.Fingerprint are one
// key) and
// write the same dead letters, so a deployment can move from one client
// to the other and keep its dedup records.
//
// # What both sources do
//
// Both sources' Capabilities, Ack, Nack, DeadLetter and Extend are one
// implementation:
//
//   - Capabilities declares the configured [Ordering] and Fingerprint as
//     the default key (the consumer's WithKeyFunc still wins); records
//     that carry no idempotency-key header are keyed by a hash over their
//     value, so the consumer need not hash the value a second time. It
//     declares whether a [DeadLetterTopic] is set, and no delivery
//     timeout: a record stays with this member until its partition is
//     revoked, so Extend does nothing.
//   - Ack marks the message done in its partition's offset tracker; the
//     offset is committed at the next [CommitInterval] once every message
//     below it is done. An ack after its partition was released is
//     dropped (see [HookKafkaLateAck]) and returns nil: the new owner
//     reads the message again and dedup answers it. A second ack fails
//     with [ErrNotInFlight], one of another source's message with
//     [ErrForeignMessage].
//   - Nack redelivers the message in place after the delay, with
//     Attempt+1; its offset is held meanwhile. On a revoked partition it
//     is not redelivered here: the partition's next owner reads it again.
//   - DeadLetter produces the message to the dead-letter topic, with its
//     key, value and headers and the [ReasonHeader] and origin headers,
//     then settles it so its partition moves on. Without a
//     DeadLetterTopic ([ErrNoDeadLetterTopic]), or if the produce fails
//     ([ErrDeadLetterFailed]), the message stays in flight.
package kafkagroup
