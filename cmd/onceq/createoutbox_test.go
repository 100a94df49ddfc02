package main

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onceq/onceq/dedup/dynamostore"
)

// create-table -outbox makes the outbox table beside the records table,
// with the indexes the relay reads; again, it accepts both.
func TestCreateTableWithOutbox(t *testing.T) {
	c := localAWS(t)
	table := tableName(t)
	for range 2 {
		code, out, errOut := onceq("create-table", "-table", table, "-outbox")
		if code != 0 || !strings.Contains(out, dynamostore.OutboxTable(table)) {
			t.Fatalf("exit %d, out %q, err %q", code, out, errOut)
		}
	}
	d, err := c.DescribeTable(t.Context(), &ddb.DescribeTableInput{TableName: aws.String(dynamostore.OutboxTable(table))})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Table.LocalSecondaryIndexes) != 1 || len(d.Table.GlobalSecondaryIndexes) != 1 {
		t.Fatalf("outbox table indexes %+v %+v, want a local and a global one", d.Table.LocalSecondaryIndexes, d.Table.GlobalSecondaryIndexes)
	}
	if code, _, errOut := onceq("create-table", "-store", "postgres", "-outbox"); code != 2 || !strings.Contains(errOut, "-outbox") {
		t.Fatalf("-outbox with postgres: exit %d, err %q; want a usage error", code, errOut)
	}
}
