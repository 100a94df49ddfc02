package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/pgstore"
)

// The pipeline flags need a store with an outbox and shipments table, and
// go neither with each other nor with the demo or batch mode.
func TestPipelineFlags(t *testing.T) {
	sqs := []string{"-source", "sqs", "-sqs-queue-url", "http://q"}
	for _, args := range [][]string{
		append(sqs, "-store", "redis", "-send-reserved-to", "http://ship"),
		append(sqs, "-ship"),
		append(sqs, "-store", "dynamodb", "-ship", "-send-reserved-to", "http://ship"),
		{"-demo", "5", "-store", "dynamodb", "-ship"},
		{"-source", "kafka", "-batch", "-store", "dynamodb", "-send-reserved-to", "ship"},
	} {
		if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%q: accepted", strings.Join(args, " "))
		}
	}
	o, err := parseFlags(append(sqs, "-store", "postgres", "-ship", "-shipments-table", "ships"), &bytes.Buffer{})
	if err != nil || !o.ship || o.shipmentsTable != "ships" {
		t.Fatalf("-ship: %+v, %v", o, err)
	}
}

// The shipping handler's write is an increment (a doubled shipment shows
// as 2), in the store's write type; anything but an order.reserved event
// is permanent.
func TestShipHandler(t *testing.T) {
	ctx := context.Background()
	ev := []byte(`{"event":"order.reserved","order_id":"o-7","sku":"sku-1","qty":2}`)
	res, err := shipHandler(shipWriter(options{store: "dynamodb", shipmentsTable: "ships"})).Handle(ctx, &consumer.Message{Body: ev})
	if err != nil || len(res.Writes) != 1 {
		t.Fatalf("%+v, %v", res, err)
	}
	up := res.Writes[0].(dynamostore.Write).Update
	if *up.TableName != "ships" || *up.UpdateExpression != "ADD shipped :one" || up.Key["order_id"].(*types.AttributeValueMemberS).Value != "o-7" {
		t.Fatalf("update %+v", up)
	}
	res, err = shipHandler(shipWriter(options{store: "postgres", shipmentsTable: "ships"})).Handle(ctx, &consumer.Message{Body: ev})
	if err != nil || !strings.Contains(res.Writes[0].(pgstore.Exec).SQL, `shipped = "ships".shipped + 1`) {
		t.Fatalf("%+v, %v", res, err)
	}
	for _, body := range []string{`{"order_id":"o-7","sku":"sku-1","qty":2}`, `{"event":"order.reserved"}`, `not json`} {
		if _, err := shipHandler(shipWriter(options{store: "dynamodb"})).Handle(ctx, &consumer.Message{Body: []byte(body)}); !errors.Is(err, consumer.ErrPermanent) {
			t.Errorf("%s: %v, want permanent", body, err)
		}
	}
}
