// Package sourcetest is the conformance suite every [broker.Source] runs,
// in the manner of Watermill's pubsub/tests: one set of behaviours, proven
// against each adapter's real broker.
//
// Besides the behaviour of each Source on its own, the suite runs the
// consumer over [Wrapped], a pass-through decorator, and shows that every
// capability the Source declares still takes effect through it.
//
// Only tests import this package (each adapter's, and others that need a
// decorated Source); it imports the consumer and the in-memory dedup store
// to run them.
package sourcetest
