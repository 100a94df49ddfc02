package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/pgstore"
)

// reservedEventBody is the body of an order.reserved event.
type reservedEventBody struct {
	Event string `json:"event"`
	Order
}

// parseReserved reads an order.reserved event; anything else is permanent.
func parseReserved(body []byte) (Order, error) {
	var ev reservedEventBody
	if err := json.Unmarshal(body, &ev); err != nil || ev.Event != reservedEvent || ev.OrderID == "" {
		return Order{}, consumer.Permanent(fmt.Errorf("not an %s event: %v", reservedEvent, err))
	}
	return ev.Order, nil
}

// shipWriter returns the store's write that records one shipment of an
// order: an increment, never a put, so that a shipment committed twice
// shows as shipped = 2.
func shipWriter(o options) func(Order) dedup.Write {
	if o.store == "postgres" {
		t := pgQuote(o.shipmentsTable)
		return func(ord Order) dedup.Write {
			return pgstore.Exec{SQL: "INSERT INTO " + t + " (order_id, shipped) VALUES ($1, 1) ON CONFLICT (order_id) DO UPDATE SET shipped = " + t + ".shipped + 1",
				Args: []any{ord.OrderID}}
		}
	}
	return func(ord Order) dedup.Write {
		return dynamostore.Write{Update: &types.Update{
			TableName:                 aws.String(o.shipmentsTable),
			Key:                       map[string]types.AttributeValue{"order_id": &types.AttributeValueMemberS{Value: ord.OrderID}},
			UpdateExpression:          aws.String("ADD shipped :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: strconv.Itoa(1)}},
		}}
	}
}

// shipHandler ships each order.reserved event's order: the shipment is a
// business write committed with the event's COMPLETED record, so a copy
// of the event (a relay's re-dispatch, a redelivery) ships nothing again.
// The event's key is its idempotency-key attribute or header, the outbox
// ID the relay sends.
func shipHandler(write func(Order) dedup.Write) consumer.Handler {
	return consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		o, err := parseReserved(m.Body)
		if err != nil {
			return consumer.Result{}, err
		}
		return consumer.Result{Writes: []dedup.Write{write(o)}}, nil
	})
}
