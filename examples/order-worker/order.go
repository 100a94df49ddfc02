package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
)

// Order is the message body.
type Order struct {
	OrderID string `json:"order_id"`
	SKU     string `json:"sku"`
	Qty     int64  `json:"qty"`
}

// ErrMalformedOrder is the cause of every dead-lettered order; the error
// is a *MalformedOrderError.
var ErrMalformedOrder = errors.New("malformed order")

// MalformedOrderError says which part of an order is off and why.
type MalformedOrderError struct {
	// Field is the JSON field at fault, or "body" for the message as a whole.
	Field string
	// Problem is what is wrong with it.
	Problem string
}

func (e *MalformedOrderError) Error() string {
	return fmt.Sprintf("%s: %s: %s", ErrMalformedOrder, e.Field, e.Problem)
}

// Is makes errors.Is(err, ErrMalformedOrder) true.
func (e *MalformedOrderError) Is(target error) bool { return target == ErrMalformedOrder }

func malformed(field, format string, args ...any) error {
	return &MalformedOrderError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// parseOrder accepts unknown fields (producers evolve) but nothing else
// that is off. The body has no size limit of its own: the broker's bounds
// it (SQS 256 KiB, or 1 MiB; Kafka the topic's max.message.bytes), and
// nothing of it is stored, only its hash.
func parseOrder(body []byte) (Order, error) {
	var o Order
	if len(body) == 0 {
		return o, malformed("body", "empty")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&o); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return o, malformed(te.Field, "%v", err)
		}
		return o, malformed("body", "not a JSON order: %v", err)
	}
	if dec.More() {
		return o, malformed("body", "trailing data after the JSON object")
	}
	switch {
	case o.OrderID == "":
		return o, malformed("order_id", "missing")
	case o.SKU == "":
		return o, malformed("sku", "missing")
	case o.Qty <= 0:
		return o, malformed("qty", "%d must be positive", o.Qty)
	}
	return o, nil
}

// Inventory turns an order into the business writes that reserve it,
// in the Store's own write type.
type Inventory interface {
	Reserve(o Order) []dedup.Write
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
		if resp, handled := reserveNow(inv, o); handled {
			return consumer.Result{Response: resp}, nil
		}
		return consumer.Result{
			Response:       reservedResponse,
			Writes:         inv.Reserve(o),
			RejectResponse: rejectedResponse,
		}, nil
	})
}
