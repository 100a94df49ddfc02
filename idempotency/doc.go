// Package idempotency runs any operation at most once per idempotency key,
// over the same dedup.Store a consumer uses: an API call that charges a
// card, a job runner's step, a webhook receiver.
//
// [Runner.Do] claims the key (a fenced lease, renewed while the function
// runs), runs the function, and commits its response with the COMPLETED
// record; the business writes the function hands over ([Tx.Write]) commit in
// the same atomic operation where the Store allows it (PostgreSQL,
// DynamoDB, memory). A repeat of the key is given the stored response
// without running the function again. A repeat while the first call still
// runs waits for it (bounded, [Wait]) or fails at once with an
// [*InProgressError]; the same key with another payload is
// [ErrKeyReuse]; a store outage is a [*StoreError] classified by package
// retry, never a stored answer.
//
// It is built on consumer.Guard: the claims, leases, heartbeats, fencing,
// spans and metrics are the consumer's (a call is a message whose body is
// the payload). Package httpidem puts it in front of a net/http handler,
// as the Idempotency-Key header field asks.
package idempotency
