package franztxn_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/franztxn"
	"github.com/onceq/onceq/outbox"
)

// A worker that reads orders and publishes orders.reserved, exactly once
// for a read_committed reader. Its transactional ID is its host name: a
// restarted pod fences its dead predecessor at once.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Outbox: []outbox.Message{
			{Destination: "orders.reserved", OrderingKey: m.OrderingKey, Body: m.Body},
		}}, nil
	})
	host, _ := os.Hostname()
	p, err := franztxn.New(ctx, []string{"localhost:9092"}, "reserver", []string{"orders"}, "reserver-"+host, h)
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
