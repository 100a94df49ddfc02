// Package storeinstr is the one set of instruments every onceq store
// carries: retries under a retry.Policy with the fault classification of
// package retry, the metrics, hooks, logger and spans of each request a
// store sends to its database. The DynamoDB, PostgreSQL and Redis stores
// each build one Instruments in New and run every request through Do, so
// an operator reads the same metric names, attributes, hooks and log lines
// whichever store runs; the db.system.name attribute tells the stores
// apart.
//
// Metrics (through the OpenTelemetry API; the MeterProvider given to the
// store's WithMeterProvider, else the global one):
//
//   - db.client.operation.duration (histogram, seconds): every request,
//     retries included, by db.system.name, onceq.store.operation and, when
//     it failed, error.type (the retry class: transient, throttled,
//     condition_failed, ...).
//   - onceq.store.errors (counter): every failed request, by
//     db.system.name, onceq.store.operation, db.response.status_code (the
//     database's error code: a DynamoDB error code, a PostgreSQL SQLSTATE,
//     a Redis error prefix; "unknown" for a reset connection or a timeout)
//     and onceq.throttle. A condition that said no, where the database
//     answers it as an error (DynamoDB's ConditionalCheckFailedException),
//     is counted too, under its own code and not as a throttle; a fence
//     that held no row (PostgreSQL, Redis) is an answer, not an error.
//   - onceq.store.retries (counter): requests retried after a backoff, by
//     the attributes of onceq.store.errors and onceq.retry.class
//     (transient, throttled).
//
// Spans: when the caller's span is recorded, each Do is a client span
// named "<operation> <db.system.name>" ("claim postgresql") with an event
// per retry. Logs (log/slog): a debug line per retry, a warning when the
// policy gives up on a retryable fault. Observers: every retry is told to
// the observer each Guard over the store hands over (Instruments.Attach,
// which a store's dedup.Store.Attach calls), so that a Consumer slows down
// on throttles.
//
// Only the stores import this package; it imports no database client.
package storeinstr
