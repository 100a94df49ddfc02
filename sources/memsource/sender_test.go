package memsource_test

import (
	"testing"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/outbox/outboxtest"
	"github.com/onceq/onceq/sources/memsource"
)

func TestSenderConformance(t *testing.T) {
	q := memsource.NewQueue("shipping", memsource.Ordering(broker.OrderByKey))
	outboxtest.Run(t, outboxtest.Case{
		Sender:      memsource.NewSender(q),
		Destination: q.Name(),
		Source:      func(*testing.T) broker.Source { return q.Source() },
		Ordered:     true,
		Missing:     "no-such-queue",
	})
}
