// Package franzsource is a [broker.Source] over franz-go's kgo client, with
// cooperative rebalancing: when a member joins or leaves, only the
// partitions that move are revoked and drained; this member goes on
// processing the partitions it keeps meanwhile. (sources/kafkasource,
// over kafka-go, has only the eager protocol: every rebalance stops every
// partition of every member.) Its packages are the only ones of onceq's
// library that use franz-go's client; package franztxn, beside it, runs
// Kafka to Kafka in Kafka transactions with no store.
//
// Its options, errors and hooks are package kafkagroup's, shared with
// sources/kafkasource; [GroupProtocol], [TLS], [SASL], [WithDialer],
// [ClientID] and [InstanceID] are franz-go's own. Source's Capabilities,
// Ack, Nack, DeadLetter and Extend are those of both Kafka sources,
// documented there.
//
// The guarantees are those of sources/kafkasource, with which it shares its
// offset tracking, its key and its metrics:
//
//   - Each assigned partition has an offset tracker: completions may come
//     in any order, and only the offset below which every delivered record
//     is settled is committed, on an interval, on revoke and on Close.
//     Commits never move backwards and never follow a partition's
//     hand-over.
//   - A revoke (OnPartitionsRevoked) stops dispatching the revoked
//     partitions, gives their in-flight messages up to RevokeTimeout to be
//     settled, commits what is complete, and only then lets the rebalance
//     go on (the client runs with BlockRebalanceOnPoll, so no poll
//     overlaps a revoke). Partitions lost to a fatal group error
//     (OnPartitionsLost) are released at once, uncommitted. A settle that
//     comes after its partition was released is dropped (see
//     [kafkagroup.HookKafkaLateAck]): the new owner reads the record again and the dedup
//     store answers it as a duplicate.
//   - [Fingerprint], the default key, is sources/kafkasource's: a deployment can
//     move from one client to the other and keep its dedup records.
//   - Nack redelivers in place after the delay, the offset held.
//     DeadLetter produces the record to the [kafkagroup.DeadLetterTopic] with its key,
//     value and headers and the [kafkagroup.ReasonHeader] and origin headers, then
//     settles it.
//   - The metrics are sources/kafkasource's (onceq.kafka.commit_lag,
//     .late_settles, .dead_letters, .commits), under this package's
//     instrumentation scope.
//
// [GroupProtocol] chooses the protocol. [Cooperative], the default, is the
// classic protocol with the cooperative-sticky balancer. [ConsumerProtocol]
// is KIP-848's broker-driven protocol (Kafka 4.0 and later; franz-go
// recommends 4.3): the broker moves partitions one member at a time, with
// no group-wide join; the tests run it against franz-go's kfake, which
// serves it. [Eager] is there only for a group migrating from eager
// members: a group whose members do not all speak cooperative falls back
// to eager.
//
// Fetching pauses while a revoke drains (the client holds polls during
// its rebalance callbacks); the partitions kept are served meanwhile from
// what was already fetched, up to MaxInFlightPerPartition each.
package franzsource
