package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/onceq/onceq/consumer"
)

// Order is the message body.
type Order struct {
	OrderID string `json:"order_id"`
	SKU     string `json:"sku"`
	Qty     int64  `json:"qty"`
}

// ErrMalformedOrder is the cause of every dead-lettered order.
var ErrMalformedOrder = errors.New("malformed order")

// parseOrder accepts unknown fields (producers evolve) but nothing else
// that is off.
func parseOrder(body []byte) (Order, error) {
	var o Order
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&o); err != nil {
		return o, fmt.Errorf("%w: %v", ErrMalformedOrder, err)
	}
	if dec.More() {
		return o, fmt.Errorf("%w: trailing data after the JSON object", ErrMalformedOrder)
	}
	switch {
	case o.OrderID == "":
		return o, fmt.Errorf("%w: order_id missing", ErrMalformedOrder)
	case o.SKU == "":
		return o, fmt.Errorf("%w: sku missing", ErrMalformedOrder)
	case o.Qty <= 0:
		return o, fmt.Errorf("%w: qty %d must be positive", ErrMalformedOrder, o.Qty)
	}
	return o, nil
}

// Inventory turns an order into the business writes that reserve it,
// in the Store's own write type.
type Inventory interface {
	Reserve(o Order) []any
}

var (
	reservedResponse = []byte(`{"status":"reserved"}`)
	rejectedResponse = []byte(`{"status":"rejected"}`)
)

// orderKey is the idempotency key: the message's idempotency-key attribute
// or header when present, else the order ID.
func orderKey(m *consumer.Message) (string, error) {
	if k, ok := m.Attributes[consumer.IdempotencyKeyAttribute]; ok {
		return k, nil
	}
	o, err := parseOrder(m.Body)
	if err != nil {
		return "", err
	}
	return o.OrderID, nil
}

// reserveHandler reserves stock for each order, exactly once: the
// reservation is the Result's Writes, committed with the COMPLETED record.
func reserveHandler(inv Inventory) consumer.Handler {
	return consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		o, err := parseOrder(m.Body)
		if err != nil {
			return consumer.Result{}, consumer.Permanent(err)
		}
		return consumer.Result{
			Response:       reservedResponse,
			Writes:         inv.Reserve(o),
			RejectResponse: rejectedResponse,
		}, nil
	})
}
