package kafkacore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/onceq/onceq/sources/kafkagroup"
)

func TestGroupMovedOn(t *testing.T) {
	wrapper, gone, other := kafkagroup.ErrCommitFailed, errors.New("unknown member"), errors.New("broker down")
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("%w: %w", wrapper, gone), true},
		{errors.Join(fmt.Errorf("%w: %w", wrapper, gone), fmt.Errorf("%w: %w", wrapper, gone)), true},
		{errors.Join(fmt.Errorf("%w: %w", wrapper, gone), fmt.Errorf("%w: %w", wrapper, other)), false}, // one failure is not the group's
		{fmt.Errorf("%w: %w", wrapper, other), false},
		{wrapper, false}, // no reason at all
	} {
		if got := GroupMovedOn(tc.err, gone); got != tc.want {
			t.Errorf("GroupMovedOn(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
