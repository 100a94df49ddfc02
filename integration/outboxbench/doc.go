// Package outboxbench measures onceq's PostgreSQL outbox, relayed to
// Kafka, beside the outbox a Go team would otherwise pick (Watermill's
// forwarder over watermill-sql) and beside a hand-written SKIP LOCKED
// loop, on the same PostgreSQL and the same in-process Kafka broker, the
// three taking turns in rounds of one run.
//
// It is a module of its own so that no user of onceq inherits Watermill.
package outboxbench
