package plainbody_test

import (
	"testing"

	"github.com/onceq/onceq/internal/plainbody"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// A body with WriteTo, like smithy-go's, reaches the wrapped client
// without it; wrapping twice wraps once.
func TestClientHidesWriteTo(t *testing.T) {
	d := &testenv.BodyRecorder{}
	testenv.CheckWriteToHidden(t, plainbody.Client(plainbody.Client(d)), d)
}
