package main

import (
	"strings"
	"testing"
)

// The share-group benchmarks' lines make the share rows: PostgreSQL beside
// the hand-written share consumer, with its target; memory beside the raw
// share consumer, with none.
func TestShareRows(t *testing.T) {
	out := "BenchmarkShareMemory-2   \t       1\t1925421768 ns/op\t        19.74 onceq_cpu-us/msg\t     25736 onceq_msgs/s\t         0.1347 ratio\t         5.098 raw_cpu-us/msg\t    191066 raw_msgs/s\n" +
		"BenchmarkSharePostgres-2   \t       1\t5475186804 ns/op\t       331.0 onceq_cpu-us/msg\t      2109 onceq_msgs/s\t         0.9317 ratio\t       164.4 raw_cpu-us/msg\t      2264 raw_msgs/s\n"
	r, err := Parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	got := Render(r, shareRows)
	for _, w := range []string{
		"| share group on PostgreSQL, 1 KiB: msgs/s, onceq vs hand-written (same claim and complete statements, accept after commit) | 2109 | 2264 | 0.93 | ≥ 0.9 | met |",
		"| share group, memory store, 1 KiB: msgs/s, onceq vs raw share consumer accepting every record (the price of exactly once) | 25736 | 191066 | 0.13 |  |  |",
	} {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("table lacks %q:\n%s", w, got)
		}
	}
}
