package franzsource

import "github.com/onceq/onceq/internal/kafkacore"

// Observers take the interfaces of sources/kafkasource, so one written for
// either source serves both. A Hook must implement at least one of them
// (New refuses one that implements none: a misspelt method is an error);
// hooks run on the source's goroutines and must be cheap and safe for
// concurrent use. Generation numbers here are the group generation of
// the classic protocol, or the member epoch under ConsumerProtocol.
type (
	// Hook is any value implementing one or more of the interfaces below.
	Hook = kafkacore.Hook
	// CommitHook: OnKafkaCommit(ctx, topic, partition, offset) sees an offset
	// (the next one to read) committed.
	CommitHook = kafkacore.CommitHook
	// CommitErrorHook: OnKafkaCommitError(ctx, generation, err) sees a commit
	// fail; it is tried again at the next interval or on revoke.
	CommitErrorHook = kafkacore.CommitErrorHook
	// LateAckHook: OnKafkaLateAck(ctx, topic, partition, offset, generation)
	// sees a settle dropped because the partition had left this member.
	LateAckHook = kafkacore.LateAckHook
	// RebalanceHook: OnKafkaRebalance(ctx, event) sees partitions assigned, or
	// revoked (or lost) and drained.
	RebalanceHook = kafkacore.RebalanceHook
	// DeadLetterHook: OnKafkaDeadLetter(ctx, topic, partition, offset, reason)
	// sees a record produced to the dead-letter topic.
	DeadLetterHook = kafkacore.DeadLetterHook
)

// RebalanceEvent is one side of a rebalance: Partitions assigned, or
// Revoked with the Drain time and the messages Abandoned. Its fields:
//
//   - Generation int32: the group generation (kafka-go) or member epoch
//     (franz-go); it only grows.
//   - Revoked bool: false when Partitions were assigned, true when they
//     were taken away (or released by Close).
//   - Partitions map[string][]int32: the partitions, by topic.
//   - Drain time.Duration: how long the wait for in-flight messages took
//     (revokes only).
//   - Abandoned int: messages still in flight when the drain ended; their
//     offsets were not committed and their settles will be dropped.
//
// (An alias of a type both Kafka sources share, so one observer serves
// either; its fields are listed here because go doc does not follow it.)
type RebalanceEvent = kafkacore.RebalanceEvent

// Headers a dead-letter record carries besides the original's own, the
// same as sources/kafkasource's:
//
//   - ReasonHeader: "onceq-dead-letter-reason", why it was dead-lettered
//   - OriginalTopicHeader: "onceq-original-topic"
//   - OriginalPartitionHeader: "onceq-original-partition", in decimal
//   - OriginalOffsetHeader: "onceq-original-offset", in decimal
const (
	ReasonHeader            = kafkacore.ReasonHeader
	OriginalTopicHeader     = kafkacore.OriginalTopicHeader
	OriginalPartitionHeader = kafkacore.OriginalPartitionHeader
	OriginalOffsetHeader    = kafkacore.OriginalOffsetHeader
)
