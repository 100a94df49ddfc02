// Package lambdabatch runs the records of one Lambda invocation through a
// [consumer.Guard]: concurrency, per-group order, leases and store calls
// capped at the invocation's deadline, dead letters, and the one rule for
// what must come back. The handler packages (lambda/sqslambda,
// lambda/kafkalambda) map their event to [Record]s and groups and their
// answer from what Run left in them.
//
// It imports consumer, dedup and broker and no SDK, so the library module
// can hold it while aws-lambda-go, the SQS SDK and kafka-go reach only the
// handler package that needs them.
package lambdabatch
