// Package audit keeps the audit trail of a dynamostore records table: an
// Auditor reads the table's DynamoDB stream (dynamostore.WithStream) and
// writes a tombstone into an archive table for each COMPLETED record TTL
// removed, which a store with dynamostore.WithArchive consults to answer a
// late duplicate; it reports each TTL delete's lag and flags keys completed
// by two owners.
//
// Run it beside a worker (go auditor.Run(ctx)), as `onceq audit`, or as a
// Lambda function on the stream (package lambda/auditlambda):
//
//	auditor, err := audit.New(db, streams, "onceq_idempotency", "onceq_archive",
//		audit.WithLogger(logger))
//	if err != nil { /* a configuration error */ }
//	go auditor.Run(ctx)
package audit
