package redrive

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupLot is a Lot of orders-dlt read by group.
func groupLot(t *testing.T, addr, group string) *Kafka {
	t.Helper()
	lot, err := NewKafka(KafkaConfig{Brokers: []string{addr}, DeadLetterTopic: "orders-dlt", Group: group, Idle: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lot.Close(context.Background()) })
	return lot
}

// A run of the redrive's group whose first fetch comes after its first
// idle poll, as a slow broker's does, has not looked at every letter: it
// returns the letter rather than end with it unread.
func TestKafkaGroupSlowFetchIsNotCaughtUp(t *testing.T) {
	k, addr := oneLetter(t, 1)
	const idle = 200 * time.Millisecond
	holdEvery(k, kmsg.Fetch, 4*idle)
	firstNextIsTheLetter(t, KafkaConfig{Brokers: []string{addr}, DeadLetterTopic: "orders-dlt", Idle: idle})
}

// A run of the redrive's group whose committed-offset lookup is slow
// still returns the letter.
func TestKafkaGroupSlowOffsetFetchIsNotCaughtUp(t *testing.T) {
	k, addr := oneLetter(t, 1)
	const idle = 200 * time.Millisecond
	holdEvery(k, kmsg.OffsetFetch, 4*idle)
	firstNextIsTheLetter(t, KafkaConfig{Brokers: []string{addr}, DeadLetterTopic: "orders-dlt", Idle: idle})
}

// openTx leaves a transaction open on partition p of orders-dlt, holding
// one letter, until the test ends.
func openTx(t *testing.T, addr, id string, p int32) {
	t.Helper()
	tx, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID(id), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tx.Close)
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(t.Context(), dlLetter(p, "open")).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// txOn writes one letter in a transaction on partition p, ended as end,
// and returns its offset.
func txOn(t *testing.T, addr, id string, p int32, end kgo.TransactionEndTry) int64 {
	t.Helper()
	tx, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID(id), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	r := dlLetter(p, fmt.Sprint(end))
	if err := tx.ProduceSync(t.Context(), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(t.Context(), end); err != nil {
		t.Fatal(err)
	}
	return r.Offset
}

// A no-group look over a topic whose end is a transaction still open
// returns the committed letter before it and ends, not waiting out the
// open transaction.
func TestKafkaNoGroupOpenTransactionAtEndEnds(t *testing.T) {
	addr, cl := dltBroker(t, 2)
	first := dlLetter(0, "o-1")
	if err := cl.ProduceSync(t.Context(), first).FirstErr(); err != nil {
		t.Fatal(err)
	}
	openTx(t, addr, "orders-open", 0)
	openTx(t, addr, "orders-open-1", 1)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if got := drain(t, ctx, noGroupLot(t, addr)); len(got) != 1 || got[0] != "orders-dlt/0@0" {
		t.Fatalf("letters %v, want orders-dlt/0@0 alone", got)
	}
}

// A partition whose last offset is the marker of an aborted transaction
// is read to its end: the look ends with no letter.
func TestKafkaNoGroupAbortedAtEndEnds(t *testing.T) {
	addr, _ := dltBroker(t, 1)
	txOn(t, addr, "orders-a", 0, kgo.TryAbort)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if got := drain(t, ctx, noGroupLot(t, addr)); len(got) != 0 {
		t.Fatalf("letters %v, want none: the one transaction was aborted", got)
	}
}

// interleaved writes aborted and committed transactions across three
// partitions and returns the IDs of the committed letters.
func interleaved(t *testing.T, addr string) []string {
	t.Helper()
	var want []string
	for i, p := range []int32{0, 1, 2, 0, 2, 1} {
		end := kgo.TryAbort
		if i%2 == 1 || p == 2 {
			end = kgo.TryCommit
		}
		o := txOn(t, addr, fmt.Sprintf("orders-w%d", i%2), p, end)
		if end == kgo.TryCommit {
			want = append(want, fmt.Sprintf("orders-dlt/%d@%d", p, o))
		}
	}
	slices.Sort(want)
	return want
}

// Aborted and committed transactions across partitions: a no-group look
// lists exactly the committed letters, and ends.
func TestKafkaNoGroupInterleavedTransactions(t *testing.T) {
	addr, _ := dltBroker(t, 3)
	want := interleaved(t, addr)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got := drain(t, ctx, noGroupLot(t, addr))
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("letters %v, want %v", got, want)
	}
}

// A group run over a topic of transactions moves the committed letters;
// a second run of the group, after it, finds none left and ends.
func TestKafkaGroupTransactionsSecondRunEmpty(t *testing.T) {
	addr, _ := dltBroker(t, 3)
	want := interleaved(t, addr)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	lot := groupLot(t, addr, "g-tx")
	got := drain(t, ctx, lot)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("first run: letters %v, want %v", got, want)
	}
	if err := lot.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if again := drain(t, ctx, groupLot(t, addr, "g-tx")); len(again) != 0 {
		t.Fatalf("second run of the group: letters %v, want none", again)
	}
}

// A group run leaving a letter (not settled) commits short of it; the
// group's next run starts at it, and reads the ones after it again.
func TestKafkaGroupSecondRunStartsAtLeftLetter(t *testing.T) {
	addr, cl := dltBroker(t, 1)
	for i := range 3 {
		if err := cl.ProduceSync(t.Context(), dlLetter(0, fmt.Sprint("o-", i))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	lot := groupLot(t, addr, "g-left")
	for {
		got, err := lot.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		for _, l := range got {
			if l.ID != "orders-dlt/0@1" {
				if err := lot.Settle(ctx, l); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := lot.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if again := drain(t, ctx, groupLot(t, addr, "g-left")); fmt.Sprint(again) != "[orders-dlt/0@1 orders-dlt/0@2]" {
		t.Fatalf("second run: letters %v, want [orders-dlt/0@1 orders-dlt/0@2]", again)
	}
}

// A partition whose letters have all been deleted (retention) holds none:
// a no-group look over it ends at once, not after a wait for offsets no
// fetch returns.
func TestKafkaNoGroupEndsOnDeletedRecords(t *testing.T) {
	addr, cl := dltBroker(t, 2)
	for _, p := range []int32{0, 0, 1} {
		if err := cl.ProduceSync(t.Context(), dlLetter(p, "old")).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: "orders-dlt", Partition: 0, At: 2})
	res, err := adm.DeleteRecords(t.Context(), os)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Error(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if got := drain(t, ctx, noGroupLot(t, addr)); fmt.Sprint(got) != "[orders-dlt/1@0]" {
		t.Fatalf("letters %v, want [orders-dlt/1@0]", got)
	}
}

// concurrentTx has two transactions open at once on every partition of
// orders-dlt, the first aborted, the second committed, and returns the
// IDs of the committed letters.
func concurrentTx(t *testing.T, addr string, parts int32) []string {
	t.Helper()
	var txs []*kgo.Client
	for _, id := range []string{"orders-ab", "orders-co"} {
		tx, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID(id), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
	}
	var want []string
	for p := range parts {
		for i, tx := range txs {
			r := dlLetter(p, fmt.Sprint("tx-", i))
			if err := tx.ProduceSync(t.Context(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if i == 1 {
				want = append(want, fmt.Sprintf("orders-dlt/%d@%d", p, r.Offset))
			}
		}
	}
	if err := txs[0].EndTransaction(t.Context(), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	if err := txs[1].EndTransaction(t.Context(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	return want
}

// Two transactions at once on each partition, one aborted, one committed:
// a no-group look and a group run each list exactly the committed
// letters, and end.
func TestKafkaConcurrentTransactions(t *testing.T) {
	for _, noGroup := range []bool{true, false} {
		t.Run(fmt.Sprint("NoGroup=", noGroup), func(t *testing.T) {
			addr, _ := dltBroker(t, 2)
			want := concurrentTx(t, addr, 2)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			lot := noGroupLot(t, addr)
			if !noGroup {
				lot = groupLot(t, addr, "g-conc")
			}
			got := drain(t, ctx, lot)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("letters %v, want %v", got, want)
			}
		})
	}
}

// A letter committed after a group run ended, behind the run's last
// transaction marker, is the next run's.
func TestKafkaGroupNextRunReadsPastMarker(t *testing.T) {
	addr, _ := dltBroker(t, 1)
	txOn(t, addr, "orders-m", 0, kgo.TryCommit)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	lot := groupLot(t, addr, "g-m")
	if got := drain(t, ctx, lot); fmt.Sprint(got) != "[orders-dlt/0@0]" {
		t.Fatalf("first run: %v", got)
	}
	if err := lot.Close(ctx); err != nil {
		t.Fatal(err)
	}
	o := txOn(t, addr, "orders-m", 0, kgo.TryCommit)
	want := fmt.Sprintf("[orders-dlt/0@%d]", o)
	if got := drain(t, ctx, groupLot(t, addr, "g-m")); fmt.Sprint(got) != want {
		t.Fatalf("second run: %v, want %s", got, want)
	}
}

// A partition added to the topic after a no-group look began is not the
// look's: it neither returns its letters nor waits for them.
func TestKafkaNoGroupPartitionAddedAfterStart(t *testing.T) {
	addr, cl := dltBroker(t, 1)
	if err := cl.ProduceSync(t.Context(), dlLetter(0, "o-1")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	lot, err := NewKafka(KafkaConfig{Brokers: []string{addr}, DeadLetterTopic: "orders-dlt", Idle: 300 * time.Millisecond, NoGroup: true,
		Options: []kgo.Opt{kgo.MetadataMinAge(10 * time.Millisecond), kgo.MetadataMaxAge(50 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lot.Close(ctx) }()
	first, err := lot.Next(ctx)
	if err != nil || len(first) != 1 {
		t.Fatalf("first Next: %d letters, %v", len(first), err)
	}
	if _, err := kadm.NewClient(cl).CreatePartitions(ctx, 1, "orders-dlt"); err != nil {
		t.Fatal(err)
	}
	// A new producer sees the new partition at once.
	pr, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := pr.ProduceSync(ctx, dlLetter(1, "o-2")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if rest := drain(t, ctx, lot); len(rest) != 0 {
		t.Fatalf("the look returned %v, in a partition added after it began", rest)
	}
}

// A group run over a topic whose end is a transaction still open moves
// the committed letter before it and ends; once the transaction commits,
// the group's next run reads its letter.
func TestKafkaGroupOpenTransactionAtEnd(t *testing.T) {
	addr, cl := dltBroker(t, 1)
	if err := cl.ProduceSync(t.Context(), dlLetter(0, "o-1")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	tx, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("orders-late"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	late := dlLetter(0, "late")
	if err := tx.ProduceSync(t.Context(), late).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	lot := groupLot(t, addr, "g-open")
	if got := drain(t, ctx, lot); fmt.Sprint(got) != "[orders-dlt/0@0]" {
		t.Fatalf("first run: %v, want [orders-dlt/0@0]", got)
	}
	if err := lot.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("[orders-dlt/0@%d]", late.Offset)
	if got := drain(t, ctx, groupLot(t, addr, "g-open")); fmt.Sprint(got) != want {
		t.Fatalf("second run: %v, want %s", got, want)
	}
}
