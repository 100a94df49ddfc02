// Package memstore is an in-process dedup.Store with the exact semantics of
// the DynamoDB Store: the embedded default and the store of fast tests.
// Records live in the process; they survive nothing.
//
// It imports only package dedup; anything may import it.
package memstore
