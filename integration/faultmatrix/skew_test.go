//go:build faultmatrix_skew

// The DynamoDB store's clock check (dynamodb.ErrClockSkew) is built on
// another branch; this file does not compile without it.
// TODO(merge): once dynamodb.ErrClockSkew is merged, move this into
// cases_test.go in place of the default checkSkewRefusal and drop the tag.

package faultmatrix_test

import (
	"errors"
	"testing"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/dynamodb"
)

func init() {
	// The documented outcome: a worker whose clock is off by more than
	// ClockSkewMargin (5 s) against DynamoDB's is refused, and stops.
	checkSkewRefusal = func(t *testing.T, worker string, err error) {
		t.Helper()
		if !errors.Is(err, dynamodb.ErrClockSkew) || !errors.Is(err, consumer.ErrMisconfigured) {
			t.Errorf("worker %s: Run = %v; want ErrMisconfigured wrapping dynamodb.ErrClockSkew", worker, err)
		}
	}
	// A duplicate may be given back by both refused workers before the
	// correct one settles it.
	skewMaxDeliveries = 3
}
