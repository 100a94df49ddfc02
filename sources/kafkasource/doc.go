// Package kafkasource is a [broker.Source] over segmentio/kafka-go's consumer
// groups, with per-partition offset tracking. It imports package broker,
// never package consumer, and it is the only Source of onceq over
// kafka-go (lambda/kafkalambda imports kafka-go too, for the Writer its
// dead letters go through). Programs import it to build a Source for the
// consumer, or use [ToMessage] and [Fingerprint] with a kafka-go loop of
// their own.
//
// Its options, errors and hooks are package kafkagroup's, shared with
// sources/franzsource; [WithDialer] and [JoinGroupBackoff] are kafka-go's
// own. Source's Capabilities, Ack, Nack, DeadLetter and Extend are those of
// both Kafka sources, documented there.
//
// It is built on kafka-go's lower-level ConsumerGroup / Generation API, not
// on kafka.Reader with a GroupID: the Reader hides revokes and, fed by a
// worker pool, commits the largest offset it was given, which can move a
// partition's offset backwards or past unfinished messages, and can land
// after the partition went to another member (kafka-go #202, #439, #1308).
//
// Here each partition of a generation has its own fetch loop and an offset
// tracker: completions may come in any order, and only the offset below
// which every delivered message is settled is committed, through the
// generation that owns the partition, on an interval, on revoke and on
// Close. When a generation ends, its partitions stop dispatching, in-flight
// messages get up to RevokeTimeout to be settled, what is complete is
// committed, and only then does the member rejoin. A settle that comes later
// is dropped (see [kafkagroup.HookKafkaLateAck]): its offset was not committed, so the new
// owner reads the message again and the dedup store answers it as a
// duplicate.
//
// Kafka has no per-message nack: Nack redelivers the message in place after
// the delay, its offset held. DeadLetter produces it to the dead-letter
// topic, then settles it so the partition moves on.
//
// Source's Capabilities declares, in one value read once by the consumer:
// the configured [kafkagroup.Ordering], which the consumer enforces per topic,
// partition and record key; [Fingerprint] as the default key, and that it
// already hashes the value of a record with no idempotency-key header; and
// whether a [kafkagroup.DeadLetterTopic] is set. It declares no delivery timeout (a
// record stays with this member until its partition is revoked, so
// Extend does nothing) and no redelivery window. Nothing is found
// by type assertion, so a decorator that embeds a *Source keeps all of it.
// [Source.Check], which the consumer's Run calls before the first receive,
// dials the brokers and proves the topics and the dead-letter topic exist.
package kafkasource
