package sourcetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/sources/memsource"
	"github.com/onceq/onceq/sources/sourcetest"
)

// A Source adapter proves itself by running the suite from a test of its
// own, with a Harness per subtest: a fresh destination (queue, or topic
// and group), a Source reading it, and the means to publish to it and to
// read its dead letters. Since an example cannot be given a *testing.T,
// this one is compiled, not run: in the adapter's _test.go file the
// function below is `func TestConformance(t *testing.T)`. The in-process
// queue stands in for the adapter's broker.
func ExampleRun() {
	conformance := func(t *testing.T) {
		sourcetest.Run(t, func(t *testing.T) *sourcetest.Harness {
			q, err := memsource.NewQueue(t.Name(), memsource.VisibilityTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			return &sourcetest.Harness{
				Source: q.Source(),
				Send: func(ctx context.Context, m sourcetest.Outgoing) error {
					return q.Send(ctx, memsource.Outgoing{Key: m.Key, Body: m.Body, Attributes: m.Attributes})
				},
				// A second Source over the same destination, as after a restart.
				Reopen: func(*testing.T) broker.Source { return q.Source() },
				DeadLetters: func(context.Context) ([]sourcetest.DeadLetter, error) {
					var out []sourcetest.DeadLetter
					for _, d := range q.DeadLetters() {
						out = append(out, sourcetest.DeadLetter{Body: d.Message.Body, Attributes: d.Message.Attributes, Reason: d.Reason})
					}
					return out, nil
				},
				// Unsettled messages come back within the visibility timeout.
				Redelivery: 2 * time.Second,
			}
		})
	}
	_ = conformance
}
