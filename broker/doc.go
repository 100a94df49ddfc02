// Package broker is the seam between the consumer and a message broker, the
// way database/sql/driver stands apart from database/sql: it holds what a
// Source implements and hands over, and nothing else. Source adapters
// (sources/sqssource, sources/kafkasource, sources/franzsource,
// sources/memsource) import this package, never package consumer; users
// meet the same types through package consumer, which re-exports them.
//
// A Source declares what it can do in one value of data, [Capabilities],
// returned by a required method, and is handed what it needs from the
// consumer (a logger, the commit-hold bound, a throttle observer) in one
// [Runtime], by the required Attach. Nothing is discovered by type
// assertion, so a wrapper that embeds a Source forwards both and keeps
// every guarantee of the Source it wraps (ordering, delivery extension,
// the retention floor, the default key, the dead-letter destination). A
// required Check lets the consumer refuse to start over a Source that
// cannot work (a missing queue or topic, denied access) rather than fail
// on the first message.
//
// This package imports nothing of onceq's but package retry (the fault
// classes, which imports nothing of onceq's), and no SDK; anything may
// import it.
package broker
