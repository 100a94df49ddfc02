package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/retry"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// startError is a deployment fault that keeps the worker from starting,
// said the way an operator acts on it: what is wrong, then what to do. Its
// text is one line.
type startError struct {
	what, fix string
	err       error
}

func (e *startError) Error() string { return e.what + ": " + e.fix }
func (e *startError) Unwrap() error { return e.err }

// missingTableError: one of the example's own tables does not exist.
type missingTableError struct {
	role, table string
	err         error
}

func (e *missingTableError) Error() string {
	return fmt.Sprintf("the %s table %q does not exist", e.role, e.table)
}
func (e *missingTableError) Unwrap() error { return e.err }

// checkExampleTables proves the inventory and orders tables exist: the
// store's check covers only the idempotency table, and a missing business
// table would otherwise surface only in the first transaction.
func checkExampleTables(ctx context.Context, client *ddb.Client, inventory, orders string) error {
	for _, t := range []struct{ role, name string }{{"inventory", inventory}, {"orders", orders}} {
		// Retried like the store's own calls: a throttle at start-up is an
		// outage, not a missing table.
		err := retry.DefaultPolicy().Do(ctx, func(ctx context.Context) error {
			_, err := client.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: aws.String(t.name)})
			return err
		}, nil)
		var missing *ddbtypes.ResourceNotFoundException
		if errors.As(err, &missing) {
			return &missingTableError{role: t.role, table: t.name, err: err}
		}
		if err != nil {
			return fmt.Errorf("%s table %s: %w", t.role, t.name, err)
		}
	}
	return nil
}

// explainStart turns a fault that stopped the worker before its first
// message into a startError; any other error is returned as it is.
// noDeadLetter says the source has no dead-letter destination, which is
// why consumer.New refused it.
func explainStart(err error, o options, noDeadLetter bool) error {
	if err == nil {
		return nil
	}
	fail := func(fix, format string, args ...any) error {
		return &startError{what: fmt.Sprintf(format, args...), fix: fix, err: err}
	}
	var (
		table   *missingTableError
		noTable *ddbtypes.ResourceNotFoundException
		layout  *dynamostore.LayoutError
		op      *smithy.OperationError
		dial    *net.OpError
	)
	switch {
	case errors.Is(err, consumer.ErrInvalidConfig) && noDeadLetter:
		return fail("pass -sqs-dlq-url, or give the queue a redrive policy", "the SQS queue %q has no dead-letter queue", o.sqsQueueURL)
	case errors.As(err, &table):
		return fail("pass -create-tables to create and seed it", "the %s table %q does not exist", table.role, table.table)
	case errors.As(err, &noTable):
		return missingTable(err, o)
	case errors.As(err, &layout):
		return fail("the worker uses the key layout: create one with `onceq create-table -table NAME` and pass -idempotency-table NAME",
			"the idempotency table %q has the tenant layout's key schema", o.idempotencyTable)
	case noQueue(err):
		// The SDK's error does not say which queue; the source's text does.
		if strings.Contains(err.Error(), "dead-letter queue") {
			if o.sqsDLQURL == "" {
				return fail("create it, or fix the queue's redrive policy (same account and region), or pass -sqs-dlq-url",
					"the dead-letter queue of the redrive policy of %q cannot be found", o.sqsQueueURL)
			}
			return fail("create it, or pass the URL of one that exists", "the dead-letter queue %q does not exist", o.sqsDLQURL)
		}
		return fail("create it, or pass the URL of one that exists with -sqs-queue-url", "the SQS queue %q does not exist", o.sqsQueueURL)
	case (o.source == "kafka" || o.source == "franz" || o.source == "share") && errors.As(err, &dial):
		return fail("start them, or fix -kafka-brokers", "cannot reach the Kafka brokers %q", o.kafkaBrokers)
	case errors.Is(err, kafkagroup.ErrUnknownTopic):
		return fail("create them on the cluster first", "the Kafka topic %q or %q does not exist", o.kafkaTopic, o.kafkaDLQTopic)
	case strings.Contains(err.Error(), "no AWS credentials found"):
		return fail("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run with an IAM role", "no AWS credentials found")
	case retry.Classify(err) == retry.Misconfigured && errors.As(err, &op):
		return fail("grant the worker the calls of the least-privilege IAM policy in docs/iam.md, or fix its credentials",
			"%s %s was refused (%s)", op.Service(), op.Operation(), errorCode(err))
	case errors.Is(err, consumer.ErrMisconfigured):
		return fail("fix the deployment; `onceq check` runs the same checks", "%s", oneLine(err))
	}
	return err
}

func noQueue(err error) bool {
	var dne *sqstypes.QueueDoesNotExist
	if errors.As(err, &dne) {
		return true
	}
	code := errorCode(err)
	return code == "QueueDoesNotExist" || code == "AWS.SimpleQueueService.NonExistentQueue"
}

func errorCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return "no error code"
}

// oneLine keeps an error's text on one line.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// missingTable says which table of the worker's does not exist: the one
// the store's error names, the idempotency table when it names none.
func missingTable(err error, o options) error {
	name := o.idempotencyTable
	var tnf *dynamostore.TableNotFoundError
	if errors.As(err, &tnf) {
		name = tnf.Table
	}
	create := fmt.Sprintf("create it with `onceq create-table -table %s` or pass -create-tables", o.idempotencyTable)
	role := "idempotency"
	switch name {
	case o.idempotencyTable:
	case dynamostore.OutboxTable(o.idempotencyTable):
		role, create = "outbox", fmt.Sprintf("create it with `onceq create-table -table %s -outbox` or pass -create-tables", o.idempotencyTable)
	case dynamostore.OffsetsTable(o.idempotencyTable):
		role = "offsets"
	case o.shipmentsTable:
		role, create = "shipments", "pass -create-tables to create it"
	default:
		role, create = "business", "create it, or fix the handler's writes"
	}
	return &startError{what: fmt.Sprintf("the %s table %q does not exist", role, name), fix: create, err: err}
}
