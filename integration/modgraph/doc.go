// Package modgraph checks what a user's module pulls in: the library's
// module requires no AWS module and none of its packages or tests imports
// one; a user of PostgreSQL and franz-go inherits no AWS module and no
// kafka-go; a module that imports the library's core, the DynamoDB store
// and the SQS source must not list the tools, exporters and test brokers
// that only the examples, the CLI and the tests need; an SQS Lambda
// function must not require kafka-go, nor a Kafka one link the SQS client;
// a kafka-go user inherits nothing of franz-go, an SQS and PostgreSQL user
// no DynamoDB SDK, and a franz-go and Redis user no AWS module and no pgx.
// A module's tests that need another module's clients live in the
// integration module, so that a user never inherits them.
package modgraph
