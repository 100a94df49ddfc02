package main

import (
	"strings"
	"testing"
)

// The batch-mode benchmarks' lines make the batch rows: PostgreSQL beside
// the raw consumer in alternating passes and per-message mode, DynamoDB's
// writes per message.
func TestBatchRows(t *testing.T) {
	out := "BenchmarkBatchPostgres-2   \t       1\t12153228775 ns/op\t     38621 batch_msgs/s\t      1826 permsg_msgs/s\t     38704 raw_msgs/s\t         416.7 msgs/store_call\t        21.15 vs_permsg\t         0.9979 vs_raw\n" +
		"BenchmarkBatchPostgresInterleaved-2 \t       1\t         0 ns/op\t         1.020 cpu_vs_min\t       120.5 min_cpu-us/op\t     30210 min_msgs/s\t       123.0 onceq_cpu-us/op\t     29400 onceq_msgs/s\t         0.8800 slowest_vs_min\t         0.9650 vs_min\n" +
		"BenchmarkBatchDynamoDB-2   \t       1\t3188415174 ns/op\t      1609 batch_msgs/s\t         0.03000 store_writes/msg\n"
	r, err := Parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	got := Render(r, batchRows)
	for _, w := range []string{
		"| Kafka batch mode on PostgreSQL: msgs/s, vs the raw consumer applying the same inserts (alternating passes) | 29400 | 30210 | 0.96 | ≥ 0.95 | met |",
		"| Kafka batch mode on PostgreSQL: slowest pass's ratio to the raw consumer's | 0.88 |  |  |  |  |",
		"| Kafka batch mode on PostgreSQL: msgs/s, vs per-message mode | 38621 | 1826 | 21.1 | ≥ 10 | met |",
		"| Kafka batch mode on DynamoDB: store writes per message, batches of 100 | 0.03 |  |  | ≤ 0.05 | met |",
	} {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("table lacks %q:\n%s", w, got)
		}
	}
}
