package kafkalambda_test

import (
	"os"
	"testing"

	"github.com/onceq/onceq/internal/lambdatest"
)

// bootstrap is the test function (./internal/testfunc), built once by
// TestMain for the tests that run it under the emulator.
var bootstrap string

func TestMain(m *testing.M) { os.Exit(lambdatest.Main(m, "./internal/testfunc", &bootstrap)) }
