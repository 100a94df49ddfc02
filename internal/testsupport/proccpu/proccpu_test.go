//go:build unix

package proccpu

import (
	"testing"
	"time"
)

func TestUsedGrowsWithWork(t *testing.T) {
	start := Used()
	deadline := time.Now().Add(5 * time.Second)
	for Used()-start < 10*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("5 s of spinning counted as %v of CPU", Used()-start)
		}
	}
	if got := PerOp(start, 2); got < 5000 {
		t.Fatalf("PerOp: %v µs per op, want ≥ 5000 (10 ms over 2 ops)", got)
	}
	if got := PerOp(start, 0); got != 0 {
		t.Fatalf("PerOp of no ops: %v", got)
	}
}
