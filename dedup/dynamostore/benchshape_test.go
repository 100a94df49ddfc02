package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
)

// errCaptured stops a call once its input is captured.
var errCaptured = errors.New("captured")

// captureInputs is a client that sends nothing: each call's input is
// appended to *got and the call fails.
func captureInputs(got *[]any) *ddb.Client {
	return ddb.New(ddb.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String("http://127.0.0.1:1"),
		APIOptions: []func(*middleware.Stack) error{func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("capture",
				func(_ context.Context, in middleware.InitializeInput, _ middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					*got = append(*got, in.Parameters)
					return middleware.InitializeOutput{}, middleware.Metadata{}, errCaptured
				}), middleware.Before)
		}},
	})
}

// shape is a request reduced to what the server sees, values printed.
func shape(in any) string {
	var b strings.Builder
	vals := func(m map[string]types.AttributeValue) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(&b, " %s=%s", k, benchValue(m[k]))
		}
	}
	names := func(m map[string]string) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(&b, " %s=%s", k, m[k])
		}
	}
	switch in := in.(type) {
	case *ddb.UpdateItemInput:
		fmt.Fprintf(&b, "UpdateItem %q %q rv=%s rvf=%s key:", aws.ToString(in.UpdateExpression), aws.ToString(in.ConditionExpression), in.ReturnValues, in.ReturnValuesOnConditionCheckFailure)
		vals(in.Key)
		b.WriteString(" names:")
		names(in.ExpressionAttributeNames)
		b.WriteString(" values:")
		vals(in.ExpressionAttributeValues)
	case *ddb.PutItemInput:
		fmt.Fprintf(&b, "PutItem %q rv=%s rvf=%s item:", aws.ToString(in.ConditionExpression), in.ReturnValues, in.ReturnValuesOnConditionCheckFailure)
		vals(in.Item)
		b.WriteString(" names:")
		names(in.ExpressionAttributeNames)
		b.WriteString(" values:")
		vals(in.ExpressionAttributeValues)
	case *ddb.TransactWriteItemsInput:
		return shape(in.TransactItems[0])
	case types.TransactWriteItem:
		switch {
		case in.Update != nil:
			u := in.Update
			return "Txn" + shape(&ddb.UpdateItemInput{Key: u.Key, UpdateExpression: u.UpdateExpression, ConditionExpression: u.ConditionExpression,
				ExpressionAttributeNames: u.ExpressionAttributeNames, ExpressionAttributeValues: u.ExpressionAttributeValues,
				ReturnValuesOnConditionCheckFailure: u.ReturnValuesOnConditionCheckFailure})
		case in.Put != nil:
			p := in.Put
			return "Txn" + shape(&ddb.PutItemInput{Item: p.Item, ConditionExpression: p.ConditionExpression,
				ExpressionAttributeNames: p.ExpressionAttributeNames, ExpressionAttributeValues: p.ExpressionAttributeValues,
				ReturnValuesOnConditionCheckFailure: p.ReturnValuesOnConditionCheckFailure})
		}
	default:
		return fmt.Sprintf("%T", in)
	}
	return b.String()
}

func benchValue(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return "S:" + v.Value
	case *types.AttributeValueMemberN:
		return "N:" + v.Value
	case *types.AttributeValueMemberB:
		return "B:" + string(v.Value)
	}
	return fmt.Sprintf("%T", v)
}

// BenchmarkDynamoDB's "own" side is the request the store sends, written
// out by hand: it must stay so, or the ratio to it measures nothing.
func TestBenchOwnShapes(t *testing.T) {
	var got []any
	st := newStore(t, captureInputs(&got), "own", dynamostore.WithRetryPolicy(fastPolicy(1)), dynamostore.WithLogger(slog.New(slog.DiscardHandler)))
	now := time.Now().Truncate(time.Second)
	shapes := benchShapes{ownTable: "own", now: now, lease: now.Add(time.Minute), keep: now.Add(time.Hour), resp: []byte("ok")}
	const k = "bench#k"
	ctx := t.Context()
	inv := &inventory{table: "inv"}
	writes := []dedup.Write{inv.reserve("sku", 1)}
	for _, c := range []struct {
		name  string
		store func()
		want  any
	}{
		{"Claim", func() {
			_, _ = st.Claim(ctx, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: k, Now: now, LeaseUntil: shapes.lease})
		}, shapes.ownClaimItem(k)},
		{"Complete", func() {
			_ = st.Complete(ctx, dedup.CompleteRequest{Lease: dedup.Lease{Key: k, Owner: k, Version: 1}, Response: shapes.resp, Now: now, ExpiresAt: shapes.keep})
		}, shapes.ownCompleteItem(k)},
		{"ClaimComplete", func() {
			_, _ = st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h", Owner: k, Response: shapes.resp, Now: now, ExpiresAt: shapes.keep})
		}, shapes.ownClaimCompleteItem(k)},
		{"ClaimCompleteWith1Write", func() {
			_, _ = st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h", Owner: k, Response: shapes.resp, Now: now, ExpiresAt: shapes.keep, Writes: writes})
		}, shapes.ownClaimCompleteTxn(k)},
	} {
		got = got[:0]
		c.store()
		if len(got) != 1 {
			t.Fatalf("%s: %d calls captured", c.name, len(got))
		}
		if g, w := shape(got[0]), shape(c.want); g != w {
			t.Errorf("%s: the store sends\n\t%s\nthe benchmark's own shape is\n\t%s", c.name, g, w)
		}
	}
}
