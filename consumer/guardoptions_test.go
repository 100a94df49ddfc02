package consumer_test

import (
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
)

// The options of the receive loop alone are not GuardOptions, so NewGuard,
// which would ignore them, does not compile with one; the rest serve both.
func TestGuardOptionsApplyToAGuard(t *testing.T) {
	loopOnly := map[string]consumer.Option{
		"Concurrency": consumer.Concurrency(1), "MaxInFlight": consumer.MaxInFlight(1),
		"DrainTimeout": consumer.DrainTimeout(time.Second), "WithoutDeadLetters": consumer.WithoutDeadLetters(),
		"WithoutAdaptiveConcurrency": consumer.WithoutAdaptiveConcurrency(),
	}
	for name, o := range loopOnly {
		if _, ok := o.(consumer.GuardOption); ok {
			t.Errorf("%s is a GuardOption, yet a Guard has no receive loop for it to apply to", name)
		}
	}
	both := []consumer.Option{consumer.LeaseTTL(time.Minute), consumer.OneRoundTrip(), consumer.WithoutCompletedCache(),
		consumer.WithoutPayloadCheck(), consumer.MaxAttempts(3), consumer.Namespace("n")}
	for _, o := range both {
		if _, ok := o.(consumer.GuardOption); !ok {
			t.Errorf("%T is not a GuardOption", o)
		}
	}
}
