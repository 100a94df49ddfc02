// Package sqslambda runs the records of an AWS Lambda SQS event through a
// [consumer.Guard], so that a Lambda function behind an SQS event source
// mapping gets the same exactly-once processing as a long-running
// consumer, on the same table and with the same keys.
//
// It is not a Source: Lambda's event source mapping polls and settles,
// and this package decides, per record, what the function answers. It
// builds on the Guard as a receive loop of your own would, so it imports
// package consumer; beside it, dedup, package sqssource (the attribute
// names and the system name a long-running SQS consumer uses),
// aws-lambda-go's events and the AWS SDK's SQS client, and no Kafka
// client: the Kafka handler is package kafkalambda, a module of its own.
// The name keeps it apart from github.com/aws/aws-lambda-go/lambda, which
// every function imports beside it.
//
//	store, _ := dynamostore.New(client, dynamostore.WithTable("idempotency"))
//	f, err := sqslambda.New(store, handler,
//		sqslambda.DeadLetterQueue(sqsClient, dlqURL))
//	if err != nil { /* a configuration error */ }
//	lambda.Start(f.Handle)
//
// # What the function returns
//
// Each record ends in the Guard's action:
//
//   - Ack (processed, a duplicate, rejected): the record is left out of
//     batchItemFailures, so the event source mapping deletes it.
//   - Retry: the record is reported in batchItemFailures and comes back
//     after the queue's visibility timeout, or, with [WithVisibility] on a
//     standard queue, once it can succeed.
//   - DeadLetter: the record is sent to the dead-letter destination given
//     with [WithDeadLetters] and then counts as handled. Without one, or
//     when sending fails, it is reported as a failure: kept, never dropped
//     (the queue's own redrive policy, or an operator, moves it on).
//
// The event source mapping must have FunctionResponseTypes set to
// ReportBatchItemFailures; without it Lambda ignores the response and
// treats any invocation that returns normally as a full success.
//
// A Misconfigured outcome (a missing table, denied access) fails the whole
// invocation: Handle returns an error wrapping [consumer.ErrMisconfigured],
// Lambda retries the batch and the error is in the function's logs and
// metrics. No record is blamed for the deployment.
//
// # Order
//
// FIFO queues: records of one message group run one at a time, in the
// order of the batch. Once a record of a group must come back, every later
// record of that group in the batch is reported too, without running, so
// the group's order holds. Groups, and the records of a standard queue,
// run concurrently, at most [Concurrency] at once.
//
// Copies of one message in a batch of a standard queue (the same
// idempotency-key attribute, or the same body) also run one after the
// other, so that a copy finds the first one's result and is a duplicate,
// rather than finding its key held and coming back after the visibility
// timeout. (Copies that only a custom key function makes equal still run
// concurrently; the one that finds the key held comes back.)
//
// # Leases and the function's timeout
//
// A Lambda function can be stopped at its timeout at any moment, and a
// record it claimed then stays PENDING until its lease ends. Every lease
// this package takes, and every renewal, is therefore capped at the
// invocation's deadline (the context's deadline, which the Lambda runtime
// sets), whatever LeaseTTL says: after a timeout the record can be taken
// over ClockSkewMargin after the function could have run, never later.
// Handlers get a context that ends [DeadlineMargin] before the deadline,
// so a handler is stopped well before its lease ends and its result is
// committed in time; a record not started by then is reported as a
// failure and comes back. Store calls, dead letters and visibility changes
// in flight are cancelled shortly before the deadline, so that the function
// answers even when the store stalls: a record whose commit did not finish
// is reported as a failure, and its next delivery finds what the store did.
// The cap is per invocation, rather than a refusal of a LeaseTTL longer
// than the function's timeout, because the timeout is not known when the
// function starts (only each invocation's deadline is), and because even a
// short lease, taken near the end of an invocation, would outlive it.
//
// # Keys
//
// The key rule is the consumer's: the idempotency-key message attribute
// when present, else the body's SHA-256, as package sqssource keys a
// received message, so moving a deployment between a Lambda function and
// a long-running consumer does not process anything twice (give both the
// same Namespace).
//
// Records map to [consumer.Message] as package sqssource maps messages:
// the MessageId, body, String and Number attributes,
// ApproximateReceiveCount as Deliveries, MessageGroupId as OrderingKey on
// a FIFO queue, the queue name as Origin.Destination. The Lambda record
// itself is kept in Message.Handle: see [Record].
package sqslambda
