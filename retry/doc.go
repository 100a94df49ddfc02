// Package retry classifies store and broker errors and backs off the ones
// worth retrying. Throttles are counted apart from condition failures, which
// are decisions and are never retried.
//
// Classification is by the error's code (the ErrorCode method smithy-go's
// APIError has) and HTTP status, so this package imports no SDK. The codes
// are listed once, here: every package that needs to tell a throttle from
// a fault asks Classify.
//
// The classes map to what the consumer does with the message (see
// docs/processing.md): the message's own fault (Permanent, a condition)
// dead-letters it; an outage (Transient, Throttled) holds it without
// spending an attempt; a configuration fault (Misconfigured) stops the
// consumer before it can blame any message.
//
// It imports nothing of onceq's and no SDK: stores and sources import it.
package retry
