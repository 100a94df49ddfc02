package kafkacore

import (
	"github.com/onceq/onceq/internal/hookset"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// Hooks are the configured observers, sorted by interface.
type Hooks struct {
	Commit      []kafkagroup.HookKafkaCommit
	CommitError []kafkagroup.HookKafkaCommitError
	LateAck     []kafkagroup.HookKafkaLateAck
	Rebalance   []kafkagroup.HookKafkaRebalance
	DeadLetter  []kafkagroup.HookKafkaDeadLetter
}

// CollectHooks sorts hs by the interfaces each implements; a hook that
// implements none is a configuration error.
func CollectHooks(hs []any) (Hooks, error) {
	var out Hooks
	err := hookset.Collect("kafka", kafkagroup.ErrInvalidConfig, hs,
		hookset.Into(&out.Commit), hookset.Into(&out.CommitError), hookset.Into(&out.LateAck),
		hookset.Into(&out.Rebalance), hookset.Into(&out.DeadLetter))
	return out, err
}
