package sqssource_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/sourcetest"
	"github.com/onceq/onceq/sources/sqssource"
)

// A stop whose context the long poll in flight used up still flushes the
// acks it holds, on a grace of its own, and returns nil: an ack left
// unflushed would bring a finished message back for nothing, and the stop
// (SIGTERM) would fail for how long SQS kept the poll open.
func TestCloseFlushesAcksAfterLongPoll(t *testing.T) {
	t.Parallel()
	c, log := recordingClient(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second})
	if err := send(context.Background(), c, url, false, sourcetest.Outgoing{Body: []byte("done before the stop")}); err != nil {
		t.Fatal(err)
	}
	src, err := sqssource.New(context.Background(), c, url, sqssource.WithLogger(testenv.Logger(t)),
		sqssource.Pollers(1), sqssource.WaitTime(20*time.Second),
		sqssource.DeleteFlushInterval(time.Hour)) // only Close flushes
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := src.Receive(testenv.Context(t, 10*time.Second), 1)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("Receive: %v %v", msgs, err)
	}
	if err := src.Ack(context.Background(), msgs[0]); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() { // a worker waiting for more: the next long poll goes out
		_, err := src.Receive(context.Background(), 1)
		waiting <- err
	}()
	for i := range 2 { // the first poll, then the second, written to the server
		select {
		case <-log.written:
		case <-time.After(10 * time.Second):
			t.Fatalf("long poll %d never went out", i+1)
		}
	}
	// The second long poll is on the server, waiting for up to 20 s.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := src.Close(ctx); err != nil {
		t.Fatalf("Close after the long poll used its context up: %v, want nil", err)
	}
	if err := <-waiting; !errors.Is(err, consumer.ErrSourceClosed) {
		t.Fatalf("the waiting Receive: %v, want ErrSourceClosed", err)
	}
	if vis, inflight := depth(t, c, url); vis != 0 || inflight != 0 {
		t.Fatalf("after Close: %d visible, %d in flight; want the acked message deleted", vis, inflight)
	}
}
