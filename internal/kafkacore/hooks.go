package kafkacore

import (
	"context"
	"time"

	"github.com/onceq/onceq/internal/hookset"
)

// Hook is an observer of a Kafka source. It must implement at least one of
// the interfaces below. Both sources take the same interfaces, so an
// observer written for one works with the other.
type Hook any

// RebalanceEvent describes one side of a rebalance as this member saw it.
type RebalanceEvent struct {
	// Generation is the group generation (kafka-go) or the member epoch
	// (franz-go); it only grows.
	Generation int32
	// Revoked is false when Partitions were assigned, true when they were
	// taken away (or released by Close).
	Revoked    bool
	Partitions map[string][]int32
	// Drain is how long the wait for in-flight messages took (revokes only).
	Drain time.Duration
	// Abandoned counts messages still in flight when the drain ended; their
	// offsets were not committed and their settles will be dropped.
	Abandoned int
}

// CommitHook sees offset (the next one to read) committed for a partition.
type CommitHook interface {
	OnKafkaCommit(ctx context.Context, topic string, partition int32, offset int64)
}

// CommitErrorHook sees a commit fail; its offsets stay uncommitted and are
// retried at the next interval (or redelivered after a rebalance).
type CommitErrorHook interface {
	OnKafkaCommitError(ctx context.Context, generation int32, err error)
}

// LateAckHook sees a message settled after its generation ended and its
// partition was released. The settle is dropped; the partition's owner
// reads the message again and the dedup store recognises it.
type LateAckHook interface {
	OnKafkaLateAck(ctx context.Context, topic string, partition int32, offset int64, generation int32)
}

// RebalanceHook sees partitions assigned to this member, or revoked from
// it and drained.
type RebalanceHook interface {
	OnKafkaRebalance(ctx context.Context, e RebalanceEvent)
}

// DeadLetterHook sees a message produced to the dead-letter topic; a
// failed produce is not reported here.
type DeadLetterHook interface {
	OnKafkaDeadLetter(ctx context.Context, topic string, partition int32, offset int64, reason string)
}

// Hooks are the configured observers, sorted by interface.
type Hooks struct {
	Commit      []CommitHook
	CommitError []CommitErrorHook
	LateAck     []LateAckHook
	Rebalance   []RebalanceHook
	DeadLetter  []DeadLetterHook
}

// CollectHooks sorts hs by the interfaces each implements; a hook that
// implements none is a configuration error wrapping invalid.
func CollectHooks(pkg string, invalid error, hs []Hook) (Hooks, error) {
	var out Hooks
	err := hookset.Collect(pkg, invalid, hs,
		hookset.Into(&out.Commit), hookset.Into(&out.CommitError), hookset.Into(&out.LateAck),
		hookset.Into(&out.Rebalance), hookset.Into(&out.DeadLetter))
	return out, err
}
