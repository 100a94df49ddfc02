package history

import (
	"strings"
	"testing"
)

// txnRun is a clean serial run: inputs in-0..in-5 on input partitions 0
// and 1 (offsets 0..2 each), two outputs each, all to output partition
// input%2, in order.
func txnRun() (map[string]int, []TxnOutput) {
	inputs := map[string]int{}
	var outs []TxnOutput
	offsets := map[int32]int64{}
	for i := range 6 {
		id := "in-" + string(rune('0'+i))
		inputs[id] = 2
		for idx := range 2 {
			p := int32(i % 2)
			outs = append(outs, TxnOutput{Input: id, Index: idx, InPartition: p, InOffset: int64(i / 2), Partition: p, Offset: offsets[p]})
			offsets[p]++
		}
	}
	return inputs, outs
}

func TestTxnGoodRun(t *testing.T) {
	inputs, outs := txnRun()
	r := CheckTxn(inputs, outs, len(outs)+4)
	if !r.OK() || r.Verdict() != "linearizable" || r.Aborted != 4 || r.Visible != 12 || r.Inputs != 6 {
		t.Fatalf("a clean run judged %s", r.Line())
	}
	if !strings.Contains(r.Line(), "lost=0 doubled=0") {
		t.Fatalf("line %q", r.Line())
	}
}

// Each kind of bad run is caught, by its own count and the verdict.
func TestTxnBadRuns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(outs []TxnOutput) []TxnOutput
		count  func(r TxnReport) int
	}{
		{"lost", func(o []TxnOutput) []TxnOutput { return append(o[:2:2], o[4:]...) }, func(r TxnReport) int { return r.Lost }},
		{"doubled", func(o []TxnOutput) []TxnOutput {
			d := o[0]
			d.Offset = 100 // an aborted transaction's output seen, or a batch committed twice
			return append(o, d)
		}, func(r TxnReport) int { return r.Doubled }},
		{"torn", func(o []TxnOutput) []TxnOutput { return append(o[:3:3], o[4:]...) }, func(r TxnReport) int { return r.Torn }},
		{"phantom", func(o []TxnOutput) []TxnOutput {
			return append(o, TxnOutput{Input: "in-9", Partition: 0, Offset: 100}, TxnOutput{Input: "in-0", Index: 2, Partition: 0, Offset: 101})
		}, func(r TxnReport) int { return r.Phantom }},
		{"out of order", func(o []TxnOutput) []TxnOutput {
			// in-0's outputs (input offset 0) come after in-2's (offset 1).
			o[0].Offset, o[1].Offset = 10, 11
			return o
		}, func(r TxnReport) int { return r.OutOfOrder }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inputs, outs := txnRun()
			r := CheckTxn(inputs, tc.change(outs), 100)
			if r.OK() || tc.count(r) == 0 || !strings.HasPrefix(r.Verdict(), "not linearizable: ") {
				t.Fatalf("accepted, or not counted: %s", r.Line())
			}
			t.Log(r.Line())
		})
	}
}
