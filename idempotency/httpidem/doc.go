// Package httpidem is net/http middleware for the Idempotency-Key request
// header field (the IETF httpapi draft "The Idempotency-Key HTTP Header
// Field"), over an idempotency.Runner and so over any dedup.Store.
//
// For the methods that require a key (POST and PATCH unless Methods says
// otherwise) the handler runs at most once per key:
//
//   - no Idempotency-Key header, or one that is not a Structured Field
//     String of 1 to MaxKeyLength printable ASCII characters: 400, with a
//     problem that says why;
//   - a key is its caller's: the same key sent with other credentials is
//     another key (Scope; by default the Authorization field; Unscoped
//     shares keys between callers);
//   - the first request runs the handler; its status, allowlisted headers
//     and body are stored with the COMPLETED record, and a business write
//     the handler hands over (Tx(r).Write)
//     commits in the same transaction where the Store allows;
//   - a retry with the same fingerprint (method, request target in origin
//     form with its query, and body; not the Host) gets the stored
//     response again, marked with "Idempotent-Replayed: true";
//   - a retry while the first is in flight: 409 with Retry-After (or it
//     waits for the first's answer, with the Runner's Wait option);
//   - the key reused with another fingerprint: 422;
//   - a store outage: 503 with Retry-After; nothing is stored.
//
// A response longer than MaxResponseBytes is sent whole, its writes
// commit, and retries get its status and replayed fields with a problem
// that names the limit: the handler never runs again for the key.
//
// Error bodies are problem details (RFC 9457, application/problem+json).
// Responses with status 2xx and 4xx are stored; a 5xx is sent as it is and
// not stored, so the client's retry runs the handler again (StoreServerErrors
// stores them too). 408, 425, 429 and 503, which ask the client to retry
// later, are never stored, and the handler's writes do not commit. Stored responses are replayed for the Runner's
// Retention (24h by default): the expiry policy to publish to clients.
package httpidem
