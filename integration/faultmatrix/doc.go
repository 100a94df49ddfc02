// Package faultmatrix holds no code, only tests: a matrix of faults of the
// infrastructure (a missing or denied table, DynamoDB down, a crashed
// holder's lease, clocks that disagree, a handler that ignores its
// context, a long key, a queue without a dead-letter queue), each run as a
// parallel subtest against the real consumer in-process over DynamoDB
// Local (behind internal/testsupport/faultproxy) and the SQS emulator, and, where
// Kafka differs (a message given back is held at its offset, not hidden),
// an in-process Kafka broker (kfake). The PostgreSQL and Redis stores
// have their cases too (a missing table, a denied ACL, the server cut off
// mid-run behind a TCP proxy), with PostgreSQL and Redis as servers.sh
// starts them.
//
// Every case checks the outcome docs/processing.md documents for its fault, that
// no valid message is dead-lettered, that every message's effect happens
// exactly once once the fault is gone (in a business table, where a second
// effect would be refused by its condition), and how often each message was
// delivered; it logs one line of figures:
//
//	go test -v -run TestFaultMatrix ./integration/faultmatrix/ | grep 'faultmatrix:'
//
// Cases that fail until work elsewhere is merged sit behind build tags:
// faultmatrix_skew (the store's refusal of a skewed clock,
// dynamostore.ErrClockSkew), faultmatrix_keys (long keys in the tenant
// layout) and faultmatrix_slow (a handler slower than the settle timeout).
package faultmatrix
