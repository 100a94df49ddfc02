package auditlambda_test

import (
	"context"
	"log"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/onceq/onceq/dedup/dynamostore/audit"
	"github.com/onceq/onceq/lambda/auditlambda"
)

// The auditor as a Lambda function on the idempotency table's stream (an
// event source mapping with the stream's ARN; `onceq create-table -stream
// -archive onceq_archive` makes both tables).
func ExampleHandler() {
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	auditor, err := audit.New(dynamodb.NewFromConfig(cfg), dynamodbstreams.NewFromConfig(cfg),
		"onceq_idempotency", "onceq_archive")
	if err != nil {
		log.Fatal(err) // a configuration error
	}
	lambda.Start(auditlambda.Handler(auditor))
}
