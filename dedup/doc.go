// Package dedup defines the idempotency record, its state machine and the
// Store seam that the consumer claims message fingerprints through.
//
// The state machine (one record per key):
//
//	absent or expired --Claim--> PENDING (lease) --Complete--> COMPLETED (retention)
//	                                             \--Fail-----> FAILED (retry delay)
//	                                             \--Fail(DeadLetter)--> DEAD_LETTER (kept)
//
// A record whose ExpiresAt has passed is treated as absent, whatever its
// status: that is what makes TTL lag harmless and lets a crashed worker's
// lease, a FAILED retry delay and a COMPLETED retention all end the same way.
// A lease alone is held for a claim's SkewMargin past its expiry, so that a
// claimer whose clock runs ahead cannot take it while it lives.
// Complete, Fail and Extend are fenced by the lease (owner and version): a
// worker whose lease was taken over gets ErrLeaseLost and must not ack.
//
// All times are supplied by the caller (one clock, the consumer's); a Store
// keeps no clock of its own (it may measure the caller's against its
// server's and refuse a claim from a clock too far off). Stored keys are
// built by Key (a producer's key) and DerivedKey (a key onceq derives from
// the message), one injective encoding every Store and the cache share; a
// Store whose layout cannot hold a key part maps it with StorablePart.
//
// A Store declares its optional features, the business write types it
// commits and the views it gives of itself in one value of data,
// Capabilities (as a Source declares its own in broker.Capabilities),
// instead of offering them as optional interfaces or methods to be
// discovered; what it needs from a Guard (a logger, a throttle observer)
// is handed over in one Attach call (Runtime). A wrapper that embeds a
// Store forwards both with the rest, so wrapping never turns a feature
// (the one-round-trip claim, the tenant layout) off unseen, nor hides a
// view. The views are interfaces for the readers other than the
// consumer: the outbox relay's (outbox.Store, in Capabilities.Outbox),
// batch mode's offset rows (Offsets, in Capabilities.Offsets, declared
// here with the types it takes, so that a Store implements it without
// importing the batch runner) and an operator's tool's (Inspector, in
// Capabilities.Inspector, which every Store gives):
//
//	caps := st.Capabilities()
//	if caps.Outbox != nil {
//		relay, err := outbox.NewRelay(caps.Outbox, sender)
//	}
//	if caps.Offsets != nil {
//		runner, err := batch.NewRunner(caps.Offsets, handler)
//	}
//
// Business writes are typed: each Store declares its write types, which
// implement Write by naming their WriteKind, and every path that carries
// writes (consumer.Result.Writes, batch mode's handler, an idempotent
// function's Tx) takes []Write. A value that is no Store's write is a
// compile error; a write of another Store is refused by a Guard, before
// the Store is called, by comparing kinds (a method call, no reflection),
// with a *consumer.WriteTypeError that stops a Consumer. Rejected
// alternatives: a type parameter for the write type (consumer.Handler[W],
// batch.Handler[W], idempotency.Runner[W]) would make a write of another
// Store a compile error, but it would spread through every handler,
// middleware, wrapper Store and option, and a handler could no longer be
// written once and shared by Stores, for one check a Guard makes as
// cheaply; an unexported marker method would keep out any Store written
// outside onceq; []any, the old contract, let any value through to be
// found by reflection on each message.
//
// It imports only retry (the fault classes its errors carry) and outbox
// (the outgoing messages a commit carries, and the relay's view), and no
// SDK: the consumer and every Store import it; a Store adapter lives in
// its own package and owns its SDK.
package dedup
