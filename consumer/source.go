package consumer

import "github.com/onceq/onceq/broker"

// The broker seam, re-exported so that a handler needs only this package.
// Source adapters implement [broker.Source]; see package broker.
type (
	// Source is [broker.Source].
	Source = broker.Source
	// Capabilities is [broker.Capabilities].
	Capabilities = broker.Capabilities
	// CommitHolder is [broker.CommitHolder].
	CommitHolder = broker.CommitHolder
	// Message is [broker.Message].
	Message = broker.Message
	// Origin is [broker.Origin].
	Origin = broker.Origin
	// Ordering is [broker.Ordering].
	Ordering = broker.Ordering
	// KeyFunc is [broker.KeyFunc].
	KeyFunc = broker.KeyFunc
)

// The orderings a Source may declare; see [broker.Ordering].
const (
	Unordered        = broker.Unordered
	OrderByKey       = broker.OrderByKey
	OrderByPartition = broker.OrderByPartition
)

// IdempotencyKeyAttribute is [broker.IdempotencyKeyAttribute].
const IdempotencyKeyAttribute = broker.IdempotencyKeyAttribute
