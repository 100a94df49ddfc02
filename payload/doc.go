// Package payload reads idempotency keys out of JSON bodies and hashes
// JSON payloads so that formatting does not count as a change.
//
//   - [JSONKey] is a key function (for consumer.WithKeyFunc): the key is
//     the value at a path into the body, such as "order.id".
//   - [CanonicalJSON] and [JSONFields] are payload hash functions (for
//     consumer.WithPayloadHash): they decide which redeliveries under one
//     key count as the same payload. CanonicalJSON ignores object key order
//     and whitespace; JSONFields looks only at the fields named.
//
// Paths are GJSON paths (github.com/tidwall/gjson): "order.id",
// "items.0.sku", "items.#.sku", `meta.trace\.id` for a name with a dot.
// GJSON is maintained and reads a value without decoding the whole
// document; JMESPath, the path language of AWS Lambda Powertools, has had
// no Go release since 2020.
//
// Errors never hold a key or any part of a body, since either may hold
// personal data: they name the path and the reason only.
//
// This package imports broker, never consumer: its functions are plain
// func values that the consumer's option types accept.
package payload
