package kafkasource

import "github.com/onceq/onceq/internal/kafkacore"

// Hook is an observer of the source, in the manner of franz-go's kgo
// hooks. It must implement at least one of the interfaces below: New
// refuses one that implements none, so a misspelt method is an error, not
// silence. Hooks are called synchronously from the source's goroutines:
// keep them cheap and safe for concurrent use. The franz source takes the
// same interfaces, so an observer serves either.
type Hook = kafkacore.Hook

// CommitHook sees offset (the next one to read) committed for a partition:
//
//	OnKafkaCommit(ctx context.Context, topic string, partition int32, offset int64)
type CommitHook = kafkacore.CommitHook

// CommitErrorHook sees a commit fail; its offsets stay uncommitted and are
// retried at the next interval (or redelivered after a rebalance):
//
//	OnKafkaCommitError(ctx context.Context, generation int32, err error)
type CommitErrorHook = kafkacore.CommitErrorHook

// LateAckHook sees a message settled after its generation ended and its
// partition was released. The settle is dropped; the partition's owner
// reads the message again and the dedup store recognises it:
//
//	OnKafkaLateAck(ctx context.Context, topic string, partition int32, offset int64, generation int32)
type LateAckHook = kafkacore.LateAckHook

// RebalanceHook sees partitions assigned to this member, or revoked from
// it and drained:
//
//	OnKafkaRebalance(ctx context.Context, e RebalanceEvent)
type RebalanceHook = kafkacore.RebalanceHook

// DeadLetterHook sees a message produced to the dead-letter topic; a
// failed produce is not reported here:
//
//	OnKafkaDeadLetter(ctx context.Context, topic string, partition int32, offset int64, reason string)
type DeadLetterHook = kafkacore.DeadLetterHook

// RebalanceEvent describes one side of a rebalance as this member saw it:
// the generation, whether Partitions were assigned or revoked, and for a
// revoke how long the drain took and how many messages it abandoned. Its
// fields:
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
