// Package sqssource is a [broker.Source] over Amazon SQS (aws-sdk-go-v2): the
// queue adapter the consumer runs over. It imports package broker, never
// package consumer, and it is the only Source of onceq over the SQS SDK
// (lambda/sqslambda, the SQS Lambda handler, imports the SDK too, for dead
// letters and visibility). Programs import it to build a Source and hand it
// to the consumer.
//
// Receive is demand-driven: pollers call ReceiveMessage (long polling,
// MaxNumberOfMessages = min(10, what is asked for)) only while a Receive
// call waits, so messages do not sit received-but-unwanted while their
// visibility runs out. A poll for fewer than ten waits while another is in
// flight, which serves the waiting Receive. Ack is asynchronous and batched into
// DeleteMessageBatch; Close flushes it. Nack and Extend change the
// visibility of one delivery; DeadLetter sends a copy to the dead-letter
// queue, then deletes the original.
//
// Mapping of an SQS message to a [broker.Message]:
//
//	MessageId                  ID
//	Body                       Body
//	MessageAttributes          Attributes (String and Number types, and
//	                           their custom subtypes; Binary attributes are
//	                           left out of Attributes, but a dead-lettered
//	                           copy carries them unchanged)
//	ApproximateReceiveCount    Attempt
//	MessageGroupId             Key (FIFO queues only)
//	SentTimestamp              SentTime(m)
//	queue name                 Origin{System: "aws_sqs", Destination: name}
//	receipt handle             Handle (opaque)
//
// Retries: every call this source makes to SQS goes out with the SDK's
// retryer switched off and is retried by a [retry.Policy] instead, so that
// throttles are classified and seen by a [HookSQSRetry], and by the consumer
// the source is attached to (broker.Runtime.Observe), rather than absorbed
// by the SDK.
//
// What the consumer needs to know of the queue it learns from one value,
// [Source.Capabilities], read once when the consumer is built: the queue's
// visibility timeout as the delivery timeout (the consumer calls
// [Source.Extend] while a handler runs), its MessageRetentionPeriod as the
// redelivery window (the consumer keeps COMPLETED records longer, and
// refuses a shorter Retention), ordering by MessageGroupId on a FIFO queue,
// and whether a dead-letter queue is known (without one the consumer
// refuses the source unless told to accept it). Nothing is found by type
// assertion, so a decorator that embeds a *Source keeps every one of these.
// [Source.Check], which the consumer's Run calls before the first receive,
// reads the queue's and the dead-letter queue's attributes: a missing queue
// or denied access stops Run as a configuration fault.
package sqssource
