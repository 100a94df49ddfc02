// Package auditlambda runs an [audit.Auditor] of the DynamoDB store as an
// AWS Lambda function on the idempotency table's DynamoDB stream: the same
// auditor that `onceq audit` or a worker's own goroutine runs (see
// audit.New), fed by an event source mapping instead of a stream reader.
//
// It converts Lambda's stream event to the DynamoDB Streams API's records,
// which is why it imports aws-lambda-go's events and the Streams SDK's
// types beside the auditor; the library module needs neither.
//
//	auditor, err := audit.New(db, streams, "onceq_idempotency", "onceq_archive")
//	if err != nil { /* a configuration error */ }
//	lambda.Start(auditlambda.Handler(auditor))
package auditlambda
