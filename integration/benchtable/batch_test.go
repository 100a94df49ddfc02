package main

import (
	"strings"
	"testing"
)

// The batch-mode benchmarks' lines make the batch rows: PostgreSQL beside
// the raw consumer and per-message mode, DynamoDB's writes per message.
func TestBatchRows(t *testing.T) {
	out := "BenchmarkBatchPostgres-2   \t       1\t12153228775 ns/op\t     38621 batch_msgs/s\t      1826 permsg_msgs/s\t     38704 raw_msgs/s\t         416.7 msgs/store_call\t        21.15 vs_permsg\t         0.9979 vs_raw\n" +
		"BenchmarkBatchDynamoDB-2   \t       1\t3188415174 ns/op\t      1609 batch_msgs/s\t         0.03000 store_writes/msg\n"
	r, err := Parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	got := Render(r, batchRows)
	for _, w := range []string{
		"| Kafka batch mode on PostgreSQL: msgs/s, vs the raw consumer applying the same inserts | 38621 | 38704 | 1 | ≥ 0.8 | met |",
		"| Kafka batch mode on PostgreSQL: msgs/s, vs per-message mode | 38621 | 1826 | 21.1 | ≥ 10 | met |",
		"| Kafka batch mode on DynamoDB: store writes per message, batches of 100 | 0.03 |  |  | ≤ 0.05 | met |",
	} {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("table lacks %q:\n%s", w, got)
		}
	}
}
