// Package storetest is the conformance suite every dedup.Store runs: the
// in-memory Store and the DynamoDB Store prove the same state machine.
//
// Times are whole seconds an hour ahead of the wall clock, so a Store that
// keeps epoch seconds sees exact values and a real TTL sweeper never removes
// a record a test is still looking at.
//
// Besides the state machine it holds every Store to the limits they share:
// any failure reason is stored (valid UTF-8, bounded), a nil business
// write is refused with a *dedup.NilWriteError, and a response over the
// Store's MaxResponseSize with a *dedup.ResponseTooLargeError, nothing
// committed. It reads every view a Store gives from its Capabilities, as
// the relay, batch mode and an operator's tool do, directly and through a
// wrapper that forwards only the Store's methods: the relay's Outbox, the
// batch Offsets, and the Inspector (a record found by its key hash, a
// listing by status, the outbox entries a commit kept).
//
// RunInstruments is the case of the instruments every networked Store
// shares (package storeinstr): the same metrics and hooks, and a fault of
// its connection retried to success, its own earlier success recognised
// when the server's answer was lost.
//
// Only tests import it: each Store adapter runs it from its own tests.
package storetest
