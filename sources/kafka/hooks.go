package kafka

import (
	"context"

	"github.com/onceq/onceq/internal/hookset"
)

// Hook is an observer of the source, in the manner of franz-go's kgo
// hooks. It must implement at least one of the interfaces below: New
// refuses one that implements none, so a misspelt method is an error, not
// silence. Hooks are called synchronously from the source's goroutines:
// keep them cheap and safe for concurrent use.
type Hook any

// CommitHook sees offset (the next one to read) committed for a partition.
type CommitHook interface {
	OnCommit(ctx context.Context, topic string, partition int32, offset int64)
}

// CommitErrorHook sees a commit fail; its offsets stay uncommitted and are
// retried at the next interval (or redelivered after a rebalance).
type CommitErrorHook interface {
	OnCommitError(ctx context.Context, generation int32, err error)
}

// LateAckHook sees a message settled after its generation ended and its
// partition was released. The settle is dropped; the partition's owner
// reads the message again and the dedup store recognises it.
type LateAckHook interface {
	OnLateAck(ctx context.Context, topic string, partition int32, offset int64, generation int32)
}

// RebalanceHook sees partitions assigned to this member, or revoked from
// it and drained.
type RebalanceHook interface {
	OnRebalance(ctx context.Context, e RebalanceEvent)
}

// DeadLetterHook sees a message produced to the dead-letter topic; a
// failed produce is not reported here.
type DeadLetterHook interface {
	OnDeadLetter(ctx context.Context, topic string, partition int32, offset int64, reason string)
}

type hooks struct {
	commit      []CommitHook
	commitError []CommitErrorHook
	lateAck     []LateAckHook
	rebalance   []RebalanceHook
	deadLetter  []DeadLetterHook
}

// collectHooks sorts hs by the interfaces each implements; a hook that
// implements none is a configuration error.
func collectHooks(hs []Hook) (hooks, error) {
	var out hooks
	err := hookset.Collect("kafka", ErrInvalidOption, hs,
		hookset.Into(&out.commit), hookset.Into(&out.commitError), hookset.Into(&out.lateAck),
		hookset.Into(&out.rebalance), hookset.Into(&out.deadLetter))
	return out, err
}
