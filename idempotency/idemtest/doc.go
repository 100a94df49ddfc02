// Package idemtest is the conformance suite of the Idempotency-Key
// middleware (package httpidem) and the idempotent functions under it
// (package idempotency), run against a real HTTP server and client over a
// given dedup.Store. Every Store runs it from its tests:
//
//	func TestIdempotencyKey(t *testing.T) {
//		idemtest.Run(t, func(t *testing.T) dedup.Store {
//			store, err := memstore.New()
//			if err != nil {
//				t.Fatal(err)
//			}
//			return store
//		})
//	}
//
// A case per requirement of the draft "The Idempotency-Key HTTP Header
// Field" (a missing or malformed key is 400, a retry in flight 409 or a
// wait, a key reused 422, with another query too, the replay of a stored
// success and of a stored error), keys scoped to their caller, 5xx
// responses not stored by default, a response over the stored limit that
// never runs the handler again, 50 concurrent retries of one key that run
// the handler once, and a store outage answered 503. With
// Options.Effect, the handler's business write is checked to commit with
// the response, once.
//
// RunKilled runs the test's own binary as the server, kills it with
// SIGKILL mid-request (before its commit, and after it), restarts it,
// and checks that the client's retry applies the request once.
package idemtest
