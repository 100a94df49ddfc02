package kafkagroup

import (
	"context"
	"time"
)

// Hook is an observer of a Kafka source, in the manner of franz-go's kgo
// hooks: each interface below is named for its one method, and a hook is
// called for every one of them it implements. It must implement at least
// one: New refuses one that implements none, so a misspelt method is an
// error, not silence. Hooks are called synchronously from the source's
// goroutines: keep them cheap and safe for concurrent use. Both sources
// take the same interfaces, so an observer serves either.
type Hook any

// HookKafkaCommit sees offset (the next one to read) committed for a
// partition.
type HookKafkaCommit interface {
	OnKafkaCommit(ctx context.Context, topic string, partition int32, offset int64)
}

// HookKafkaCommitError sees a commit fail; its offsets stay uncommitted
// and are retried at the next interval or on revoke (or redelivered after
// a rebalance).
type HookKafkaCommitError interface {
	OnKafkaCommitError(ctx context.Context, generation int32, err error)
}

// HookKafkaLateAck sees a message settled after its generation ended and
// its partition was released. The settle is dropped; the partition's
// owner reads the message again and the dedup store recognises it.
type HookKafkaLateAck interface {
	OnKafkaLateAck(ctx context.Context, topic string, partition int32, offset int64, generation int32)
}

// HookKafkaRebalance sees partitions assigned to this member, or revoked
// from it (or lost) and drained.
type HookKafkaRebalance interface {
	OnKafkaRebalance(ctx context.Context, e RebalanceEvent)
}

// HookKafkaDeadLetter sees a message produced to the dead-letter topic; a
// failed produce is not reported here.
type HookKafkaDeadLetter interface {
	OnKafkaDeadLetter(ctx context.Context, topic string, partition int32, offset int64, reason string)
}

// RebalanceEvent describes one side of a rebalance as this member saw it.
type RebalanceEvent struct {
	// Generation is the group generation (kafka-go, and franz-go's
	// classic protocol) or the member epoch (franz-go's ConsumerProtocol);
	// it only grows.
	Generation int32
	// Revoked is false when Partitions were assigned, true when they were
	// taken away (or released by Close).
	Revoked bool
	// Partitions are the partitions, by topic.
	Partitions map[string][]int32
	// Drain is how long the wait for in-flight messages took (revokes only).
	Drain time.Duration
	// Abandoned counts messages still in flight when the drain ended; their
	// offsets were not committed and their settles will be dropped.
	Abandoned int
}
