package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"time"
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

// ttlLag is how long DynamoDB may take to delete an expired item: storage
// carries that many hours of expired records beyond the retention.
const ttlLag = 48 * time.Hour

// itemOverhead is what DynamoDB adds to each item's size for storage.
const itemOverhead = 100

// storagePlan is the storage of the table and the archive at a steady rate
// of unique messages, and the archive's own capacity.
type storagePlan struct {
	TableItems, TableBytes     float64
	ArchiveItems, ArchiveBytes float64
	ArchiveRCU                 float64 // claims reading the archive: 0.5 per new key
	ArchiveWCU                 float64 // tombstones written by the auditor: 1 per completion removed
}

// planStorage: items live for retention plus the TTL lag, in the table
// and (tombstones of tombstoneBytes) in the archive when archiveRetention
// is not zero.
func planStorage(rps float64, retention time.Duration, itemBytes int, archiveRetention time.Duration, tombstoneBytes int) storagePlan {
	p := storagePlan{TableItems: rps * (retention + ttlLag).Seconds()}
	p.TableBytes = p.TableItems * float64(itemBytes+itemOverhead)
	if archiveRetention > 0 {
		p.ArchiveItems = rps * (archiveRetention + ttlLag).Seconds()
		p.ArchiveBytes = p.ArchiveItems * float64(tombstoneBytes+itemOverhead)
		p.ArchiveRCU, p.ArchiveWCU = rps*0.5, rps
	}
	return p
}

func runCapacity(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("onceq capacity", stderr,
		"usage: onceq capacity -rps N [-dup RATIO] [-txn-items N] [-retention D] [-item-bytes N] [-archive-retention D] [-avg-rps N]",
		"Budgets DynamoDB write capacity (WCU) for an idempotency table at a peak rate of unique messages,",
		"and the storage of the table and the audit trail's archive.",
		"-store postgres: SQL statements and writing commits per second, rows, index and dead-row volume instead.",
		"-store redis: commands per second and the memory the records take instead.",
	)
	store := fs.String("store", storeDynamo, "the dedup store: dynamodb, postgres or redis")
	rps := fs.Float64("rps", 0, "peak unique messages per second (required)")
	dup := fs.Float64("dup", 0.15, "expected duplicate ratio (0.15 = 15% extra deliveries)")
	txn := fs.Int("txn-items", 2, "items per TransactWriteItems in transaction modes, the idempotency record included")
	retention := fs.Duration("retention", 24*time.Hour, "how long a COMPLETED record is kept (the consumer's Retention)")
	itemBytes := fs.Int("item-bytes", 300, "size of a record: key, attributes and cached response")
	archive := fs.Duration("archive-retention", 0, "with the audit trail's archive: how long tombstones are kept (0: no archive)")
	stoneBytes := fs.Int("tombstone-bytes", 200, "size of a tombstone: key, owner, version, payload hash, times")
	avg := fs.Float64("avg-rps", 0, "average unique messages per second, for storage (default: -rps, an upper bound)")
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
	case *retention <= 0 || *archive < 0 || *itemBytes < 1 || *stoneBytes < 1 || *avg < 0 || math.IsNaN(*avg) || math.IsInf(*avg, 0):
		fmt.Fprintln(stderr, "onceq capacity: -retention, -item-bytes and -tombstone-bytes must be positive, -archive-retention and -avg-rps not negative")
		return 2
	}
	switch set := setFlags(fs); {
	case *store != storeDynamo && *store != storePostgres && *store != storeRedis:
		fmt.Fprintf(stderr, "onceq capacity: -store %q: want dynamodb, postgres or redis\n", *store)
		return 2
	case *store != storeDynamo && (set["archive-retention"] || set["tombstone-bytes"]):
		fmt.Fprintln(stderr, "onceq capacity: -archive-retention and -tombstone-bytes are DynamoDB's (the audit trail's archive)")
		return 2
	case *store == storeRedis && set["txn-items"]:
		fmt.Fprintln(stderr, "onceq capacity: -txn-items: Redis takes no business writes")
		return 2
	case *store != storeDynamo:
		rate := *avg
		if rate == 0 {
			rate = *rps
		}
		printStoreCapacity(stdout, *store, *rps, *dup, *txn, *retention, *itemBytes, rate)
		return 0
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
	rate := *avg
	if rate == 0 {
		rate = *rps
	}
	st := planStorage(rate, *retention, *itemBytes, *archive, *stoneBytes)
	fmt.Fprintf(stdout, "\nstorage at %.0f unique msg/s, kept for retention + 48 h of TTL lag (DynamoDB deletes expired items late):\n", rate)
	fmt.Fprintf(stdout, "%-34s %14.0f items %10.2f GB\n", fmt.Sprintf("table (%v + 48h, %d B/item)", *retention, *itemBytes), st.TableItems, st.TableBytes/1e9)
	if *archive > 0 {
		fmt.Fprintf(stdout, "%-34s %14.0f items %10.2f GB\n", fmt.Sprintf("archive (%v + 48h, %d B/item)", *archive, *stoneBytes), st.ArchiveItems, st.ArchiveBytes/1e9)
		fmt.Fprintf(stdout, "archive reads by claims (WithArchive): 0.5 RCU per new key = %.0f RCU; tombstones: 1 WCU per removed completion = %.0f WCU\n",
			math.Ceil(st.ArchiveRCU), math.Ceil(st.ArchiveWCU))
	}
	fmt.Fprintln(stdout, "Each item counts 100 B of DynamoDB overhead; a global secondary index mirroring the table adds its own copy.")
	return 0
}
