// Package kafkalambda runs the records of an AWS Lambda Kafka event (from
// Amazon MSK or a self-managed cluster) through a [consumer.Guard], so
// that a Lambda function behind a Kafka event source mapping gets the same
// exactly-once processing as a long-running consumer, on the same table
// and with the same keys.
//
// It is not a Source: Lambda's event source mapping polls and commits,
// and this package decides, per record, what the function answers. It
// builds on the Guard as a receive loop of your own would, so it imports
// package consumer; beside it, dedup, package kafkasource (the key
// [kafkasource.Fingerprint] and the dead-letter headers) and with it
// kafka-go, whose Writer [DeadLetterTopic] sends through, and aws-lambda-go's
// events. It is a module of its own, so an SQS function (package
// sqslambda) neither links nor requires kafka-go.
//
//	f, err := kafkalambda.New(store, handler,
//		kafkalambda.DeadLetterTopic(&kafka.Writer{Addr: addr, Topic: "orders-dlq"}))
//	if err != nil { /* a configuration error */ }
//	lambda.Start(f.Handle)
//
// # What the function returns
//
// Each record ends in the Guard's action: Ack (processed, a duplicate,
// rejected) moves past it; Retry reports it, and Lambda resumes its
// partition there; DeadLetter sends it to the destination given with
// [WithDeadLetters] and then moves past it, or, with none or when sending
// fails, reports it (kept, never dropped). A Misconfigured outcome (a
// missing table, denied access) fails the whole invocation: Handle returns
// an error wrapping [consumer.ErrMisconfigured] and Lambda retries the
// batch. The event source mapping must have FunctionResponseTypes set to
// ReportBatchItemFailures.
//
// # Order
//
// Records of one topic-partition run one at a time, in offset order;
// partitions run concurrently, at most [Concurrency] at once. Lambda
// resumes a partition from the offset reported, so for each partition at
// most one record is reported, the first that must come back, and the
// records after it do not run.
//
// # Leases and the function's timeout
//
// As in package sqslambda: every lease, and every renewal, is capped at
// the invocation's deadline whatever LeaseTTL says; handlers get a context
// that ends [DeadlineMargin] before it, and a record not started by then is
// reported; store calls and dead letters in flight are cancelled shortly
// before the deadline, so the function answers even when the store stalls.
//
// # Keys
//
// The key is the idempotency-key header when present, else
// [kafkasource.Fingerprint] (a hash of topic, record key and value), as
// package kafkasource keys a fetched record, so moving a deployment
// between a Lambda function and a long-running consumer does not process
// anything twice (give both the same Namespace). Records map to
// [consumer.Message] as kafkasource.ToMessage maps them: the decoded key
// (as OrderingKey) and value, headers as Attributes, topic/partition/offset
// as ID and Origin. The Lambda record itself is kept in Message.Handle: see
// [Record].
package kafkalambda
