// Package broker is the seam between the consumer and a message broker, the
// way database/sql/driver stands apart from database/sql: it holds what a
// Source implements and hands over, and nothing else. Source adapters
// (sources/sqssource, sources/kafkasource, sources/franzsource,
// sources/memsource) import this package, never package consumer; users
// meet the same types through package consumer, which re-exports them.
//
// A Source declares what it can do in one value, [Capabilities], returned
// by a required method. Nothing is discovered by type assertion, so a
// wrapper that forwards Capabilities keeps every guarantee of the Source it
// wraps (ordering, delivery extension, the retention floor, the default
// key, the dead-letter destination). A required Check lets the consumer
// refuse to start over a Source that cannot work (a missing queue or
// topic, denied access) rather than fail on the first message.
//
// This package imports nothing of onceq's and no SDK; anything may import it.
package broker
