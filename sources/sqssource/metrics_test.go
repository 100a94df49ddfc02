package sqssource_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/onceq/onceq/internal/testsupport/metrictest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/sourcetest"
	"github.com/onceq/onceq/sources/sqssource"
)

// Visibility extensions and nacks, dead-letter sends and delete batches
// are counted on fauxqs, by result.
func TestMetrics(t *testing.T) {
	t.Parallel()
	c := client(t)
	_, dlqARN := createQueue(t, c, queueSpec{})
	url, _ := createQueue(t, c, queueSpec{redrive: dlqARN, maxReceive: 10})
	for _, b := range []string{"a", "b", "c"} {
		if err := send(context.Background(), c, url, false, sourcetest.Outgoing{Body: []byte(b)}); err != nil {
			t.Fatal(err)
		}
	}
	reader, mp := metrictest.Provider(t)
	src, err := sqssource.New(context.Background(), c, url, sqssource.WithLogger(testenv.Logger(t)), sqssource.WaitTime(time.Second), sqssource.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	msgs := receiveN(t, src, 3)
	for range 2 {
		if err := src.Extend(context.Background(), msgs[0], 40*time.Second); err != nil {
			t.Fatalf("extend: %v", err)
		}
	}
	if err := src.Nack(context.Background(), msgs[0], 0); err != nil {
		t.Fatalf("nack: %v", err)
	}
	if err := src.DeadLetter(context.Background(), msgs[1], "poison"); err != nil {
		t.Fatalf("dead letter: %v", err)
	}
	if err := src.Ack(context.Background(), msgs[2]); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	ok := attribute.String("onceq.result", "ok")
	queue := attribute.String("messaging.destination.name", queueNameOf(url))
	if n := metrictest.Counter(t, reader, "onceq.sqs.visibility_changes", queue, ok, attribute.String("onceq.sqs.operation", "Extend")); n != 2 {
		t.Errorf("extensions %d, want 2", n)
	}
	if n := metrictest.Counter(t, reader, "onceq.sqs.visibility_changes", ok, attribute.String("onceq.sqs.operation", "Nack")); n != 1 {
		t.Errorf("nacks %d, want 1", n)
	}
	if n := metrictest.Counter(t, reader, "onceq.sqs.dead_letters", queue, ok); n != 1 {
		t.Errorf("dead letters %d, want 1", n)
	}
	if n := metrictest.Counter(t, reader, "onceq.sqs.delete_batches", ok); n != 1 {
		t.Errorf("delete batches %d, want 1 (one ack, flushed on close)", n)
	}
	if n := metrictest.Counter(t, reader, "onceq.sqs.delete_failures"); n != 0 {
		t.Errorf("delete failures %d, want 0", n)
	}
}

func queueNameOf(url string) string {
	for i := len(url) - 1; i >= 0; i-- {
		if url[i] == '/' {
			return url[i+1:]
		}
	}
	return url
}
