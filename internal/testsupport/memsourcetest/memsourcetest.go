// Package memsourcetest makes in-process queues and senders for tests:
// each fails the test where memsource's constructor returns an error, so
// that a test takes a queue in an expression.
package memsourcetest

import (
	"testing"

	"github.com/onceq/onceq/sources/memsource"
)

// NewQueue returns memsource.NewQueue(name, opts...), failing t on its
// error.
func NewQueue(t testing.TB, name string, opts ...memsource.Option) *memsource.Queue {
	t.Helper()
	q, err := memsource.NewQueue(name, opts...)
	if err != nil {
		t.Fatalf("memsource.NewQueue: %v", err)
	}
	return q
}

// NewSender returns memsource.NewSender(queues...), failing t on its
// error.
func NewSender(t testing.TB, queues ...*memsource.Queue) *memsource.Sender {
	t.Helper()
	s, err := memsource.NewSender(queues...)
	if err != nil {
		t.Fatalf("memsource.NewSender: %v", err)
	}
	return s
}
