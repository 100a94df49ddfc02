package kafkasource_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/sources/kafkasource"
)

// A producer's idempotency-key header equal to another record's
// fingerprint names a key of its own: both records are processed (a
// producer-supplied key and a derived one never share a record).
func TestHeaderCannotPoseAsFingerprint(t *testing.T) {
	var runs atomic.Int32
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		runs.Add(1)
		return consumer.Result{Response: m.Body}, nil
	})
	g, err := consumer.NewGuard(memstoretest.New(t), h, consumer.WithSourceKey(kafkasource.Fingerprint, kafkasource.KeyCoversBody))
	if err != nil {
		t.Fatal(err)
	}
	victim := &consumer.Message{ID: "orders/0/1", Body: []byte("victim"), OrderingKey: "k"}
	fp, _ := kafkasource.Fingerprint(victim)
	forger := &consumer.Message{ID: "orders/0/2", Body: []byte("forged"), Attributes: map[string]string{consumer.IdempotencyKeyAttribute: fp}}
	of := g.Process(t.Context(), forger)
	ov := g.Process(t.Context(), victim)
	if of.Kind != consumer.Processed || ov.Kind != consumer.Processed || runs.Load() != 2 {
		t.Fatalf("forger %v, victim %v (%v), %d runs: want both processed", of.Kind, ov.Kind, ov.Err, runs.Load())
	}
}
