package main

import (
	"context"
	"fmt"
	"io"
	"math"
)

// capacityPlan is the write budget of a workload, per store mode. It
// assumes items of at most 1 KB (one WCU per standard write) and that a
// failed condition costs what a successful write does, as DynamoDB charges.
type capacityPlan struct {
	PeakRPS, DupRatio   float64
	TxnItems            int
	OneWritePerDelivery float64 // one write per delivery: peak × (1 + duplicate ratio)
	ClaimComplete       float64 // claim + complete per unique, one claim per duplicate
	Transaction         float64 // claim + TransactWriteItems(items) at 2× per item
	OneRoundTrip        float64 // TransactWriteItems(items) at 2× per item, duplicates cancelled at the same price
}

func planCapacity(peak, dup float64, txnItems int) capacityPlan {
	dups := peak * dup
	items := float64(txnItems)
	return capacityPlan{
		PeakRPS: peak, DupRatio: dup, TxnItems: txnItems,
		OneWritePerDelivery: peak * (1 + dup),
		ClaimComplete:       peak*2 + dups,
		Transaction:         peak*(1+2*items) + dups,
		OneRoundTrip:        (peak + dups) * 2 * items,
	}
}

func runCapacity(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("onceq capacity", stderr,
		"usage: onceq capacity -rps N [-dup RATIO] [-txn-items N]",
		"Budgets DynamoDB write capacity (WCU) for an idempotency table at a peak rate of unique messages.",
	)
	rps := fs.Float64("rps", 0, "peak unique messages per second (required)")
	dup := fs.Float64("dup", 0.15, "expected duplicate ratio (0.15 = 15% extra deliveries)")
	txn := fs.Int("txn-items", 2, "items per TransactWriteItems in transaction modes, the idempotency record included")
	if err := fs.Parse(args); err != nil {
		return usageExit(err)
	}
	switch {
	case *rps <= 0 || math.IsInf(*rps, 0) || math.IsNaN(*rps):
		fmt.Fprintln(stderr, "onceq capacity: -rps must be a positive number")
		return 2
	case *dup < 0 || *dup > 100 || math.IsNaN(*dup):
		fmt.Fprintln(stderr, "onceq capacity: -dup must be a ratio of 0 or more (0.15 = 15%)")
		return 2
	case *txn < 1 || *txn > 100:
		fmt.Fprintln(stderr, "onceq capacity: -txn-items must be 1 to 100 (TransactWriteItems' limit)")
		return 2
	}
	p := planCapacity(*rps, *dup, *txn)
	fmt.Fprintf(stdout, "peak %.0f unique msg/s, %.0f%% duplicates (%.0f deliveries/s), items of at most 1 KB\n",
		p.PeakRPS, p.DupRatio*100, p.PeakRPS*(1+p.DupRatio))
	fmt.Fprintf(stdout, "%-34s %10s\n", "mode", "WCU")
	fmt.Fprintf(stdout, "%-34s %10.0f\n", "one write per delivery (a floor)", math.Ceil(p.OneWritePerDelivery))
	fmt.Fprintf(stdout, "%-34s %10.0f\n", "claim + complete", math.Ceil(p.ClaimComplete))
	fmt.Fprintf(stdout, "%-34s %10.0f\n", fmt.Sprintf("claim + transaction (%d items)", p.TxnItems), math.Ceil(p.Transaction))
	fmt.Fprintf(stdout, "%-34s %10.0f\n", fmt.Sprintf("one round trip (%d items)", p.TxnItems), math.Ceil(p.OneRoundTrip))
	fmt.Fprintln(stdout, "A failed condition costs a write like a successful one; TransactWriteItems costs 2× per item.")
	fmt.Fprintln(stdout, "Duplicates answered by the consumer's COMPLETED cache cost nothing. For spiky traffic prefer")
	fmt.Fprintln(stdout, "on-demand billing (what create-table sets): no budget to pre-provision, a higher price per request.")
	return 0
}
