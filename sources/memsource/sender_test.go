package memsource_test

import (
	"errors"
	"testing"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/outbox/outboxtest"
	"github.com/onceq/onceq/sources/memsource"
)

func TestSenderConformance(t *testing.T) {
	q := memsourcetest.NewQueue(t, "shipping", memsource.Ordering(broker.OrderByKey))
	outboxtest.Run(t, outboxtest.Case{
		Sender:      memsourcetest.NewSender(t, q),
		Destination: q.Name(),
		Source:      func(*testing.T) broker.Source { return q.Source() },
		Ordered:     true,
		Missing:     "no-such-queue",
	})
}

// A queue no Destination can name, and a Sender that could reach only one
// of two queues of one name, are refused at construction.
func TestConstructorsRefuse(t *testing.T) {
	if q, err := memsource.NewQueue(""); !errors.Is(err, memsource.ErrInvalidConfig) || q != nil {
		t.Errorf("NewQueue(\"\"): %v, %v; want ErrInvalidConfig", q, err)
	}
	a, b := memsourcetest.NewQueue(t, "orders"), memsourcetest.NewQueue(t, "orders")
	for name, qs := range map[string][]*memsource.Queue{"nil queue": {a, nil}, "one name twice": {a, b}} {
		if s, err := memsource.NewSender(qs...); !errors.Is(err, memsource.ErrInvalidConfig) || s != nil {
			t.Errorf("%s: NewSender: %v, %v; want ErrInvalidConfig", name, s, err)
		}
	}
	if _, err := memsource.NewSender(a, memsourcetest.NewQueue(t, "shipping")); err != nil {
		t.Fatalf("two queues of two names: %v", err)
	}
}
