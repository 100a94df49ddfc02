package storeinstr

// The operations of a store's batch view (package batch), values of
// onceq.store.operation and the op of every hook as the others are.
const (
	OpBatchAcquire = "batch_acquire"
	OpBatchCommit  = "batch_commit"
	OpBatchOffset  = "batch_offset"
)
