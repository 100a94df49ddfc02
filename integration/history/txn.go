package history

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// A Kafka-transactions run (a processor that commits each poll's outputs
// with its consumed offsets in one transaction) has no store to record:
// its history is what a read_committed reader sees of the output topic.
// Its model: the inputs are taken in each partition's offset order, and
// each input's outputs (all of them, or none) are committed once, so the
// visible outputs are those of one serial run over the inputs. Outputs
// of an aborted transaction are never visible.

// TxnOutput is one output record as the reader saw it. Its body names
// its input; the reader adds where it lies.
type TxnOutput struct {
	// Input is the input's ID, Index the output's place among that
	// input's outputs, and InPartition and InOffset where the input lies.
	Input       string `json:"input"`
	Index       int    `json:"index"`
	InPartition int32  `json:"in_partition"`
	InOffset    int64  `json:"in_offset"`
	// Partition and Offset are where the output lies.
	Partition int32 `json:"-"`
	Offset    int64 `json:"-"`
}

// TxnReport is what CheckTxn found.
type TxnReport struct {
	Inputs  int // inputs produced
	Visible int // outputs a read_committed reader saw
	// Aborted counts the outputs written but never committed (a reader
	// of uncommitted data saw them, a read_committed one did not): the
	// transactions the chaos cut short.
	Aborted int

	// The anomalies. Lost: inputs with no output visible. Doubled:
	// outputs visible again after an input's first copy of the same
	// index. Torn: inputs with some of their outputs visible but not all
	// (a transaction committed in part). Phantom: outputs of no input, or
	// of an index past the input's outputs. OutOfOrder: outputs of one
	// input partition visible in an output partition ahead of the
	// outputs of an input before them.
	Lost, Doubled, Torn, Phantom, OutOfOrder int
	// First describes the first anomaly found (by input ID), "" when none.
	First string

	Took time.Duration
}

// Anomalies is the sum of the anomaly counts.
func (r TxnReport) Anomalies() int { return r.Lost + r.Doubled + r.Torn + r.Phantom + r.OutOfOrder }

// OK reports whether no anomaly was found.
func (r TxnReport) OK() bool { return r.Anomalies() == 0 }

// Verdict is "linearizable" when the visible outputs are those of one
// serial run over the inputs, each once, in each partition's order;
// else "not linearizable: …" naming the first anomaly.
func (r TxnReport) Verdict() string {
	if r.OK() {
		return "linearizable"
	}
	return "not linearizable: " + r.First
}

// Line is the report on one line, the verdict last.
func (r TxnReport) Line() string {
	return fmt.Sprintf("history: txn: inputs=%d visible=%d aborted=%d lost=%d doubled=%d torn=%d phantom=%d out_of_order=%d checked_in=%s verdict: %s",
		r.Inputs, r.Visible, r.Aborted, r.Lost, r.Doubled, r.Torn, r.Phantom, r.OutOfOrder, r.Took.Round(time.Millisecond), r.Verdict())
}

// CheckTxn judges the outputs a read_committed reader saw (visible, each
// output partition's in offset order) against inputs, every input's ID
// with how many outputs it makes. uncommitted is how many outputs a
// reader of uncommitted data saw: those past the visible ones were
// aborted.
func CheckTxn(inputs map[string]int, visible []TxnOutput, uncommitted int) TxnReport {
	start := time.Now()
	r := TxnReport{Inputs: len(inputs), Visible: len(visible), Aborted: max(0, uncommitted-len(visible))}
	type slot struct {
		input string
		index int
	}
	seen := map[slot]int{}
	var firsts []string // each anomaly's description, for the first by input ID
	note := func(input, what string) { firsts = append(firsts, input+"\x00"+what) }
	var real []TxnOutput // the outputs of an input
	for _, o := range visible {
		if n, ok := inputs[o.Input]; !ok || o.Index < 0 || o.Index >= n {
			r.Phantom++
			note(o.Input, fmt.Sprintf("output %d of input %q, which makes no such output", o.Index, o.Input))
			continue
		}
		real = append(real, o)
		s := slot{o.Input, o.Index}
		if seen[s]++; seen[s] > 1 {
			r.Doubled++
			note(o.Input, fmt.Sprintf("output %d of input %q visible %d times", o.Index, o.Input, seen[s]))
		}
	}
	for in, n := range inputs {
		got := 0
		for i := range n {
			if seen[slot{in, i}] > 0 {
				got++
			}
		}
		switch {
		case got == 0:
			r.Lost++
			note(in, fmt.Sprintf("input %q has no output visible", in))
		case got < n:
			r.Torn++
			note(in, fmt.Sprintf("input %q has %d of its %d outputs visible", in, got, n))
		}
	}
	// In each output partition, the outputs of one input partition come
	// in its offset order (an input's own outputs in index order).
	type key struct{ out, in int32 }
	last := map[key]TxnOutput{}
	byPart := real
	slices.SortStableFunc(byPart, func(a, b TxnOutput) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	for _, o := range byPart {
		k := key{o.Partition, o.InPartition}
		if p, ok := last[k]; ok && (o.InOffset < p.InOffset || (o.InOffset == p.InOffset && o.Index < p.Index)) {
			r.OutOfOrder++
			note(o.Input, fmt.Sprintf("output %d of input %q (input offset %d) visible after input offset %d's output %d", o.Index, o.Input, o.InOffset, p.InOffset, p.Index))
		}
		last[k] = o
	}
	if len(firsts) > 0 {
		slices.Sort(firsts)
		_, r.First, _ = strings.Cut(firsts[0], "\x00")
	}
	r.Took = time.Since(start)
	return r
}
