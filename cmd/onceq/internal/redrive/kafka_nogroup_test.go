package redrive

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/sources/kafkagroup"
)

// dltBroker is an in-process broker whose topic orders-dlt has partitions
// partitions, and a client producing to it.
func dltBroker(t *testing.T, partitions int32) (string, *kgo.Client) {
	t.Helper()
	k, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(partitions, "orders-dlt"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	addr := k.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return addr, cl
}

func dlLetter(partition int32, key string) *kgo.Record {
	return &kgo.Record{Topic: "orders-dlt", Partition: partition, Key: []byte(key), Value: []byte(`{}`),
		Headers: []kgo.RecordHeader{{Key: kafkagroup.OriginalTopicHeader, Value: []byte("orders")}}}
}

// drain calls Next until the Lot has no more, settling each letter, and
// returns the letters' IDs.
func drain(t *testing.T, ctx context.Context, lot *Kafka) []string {
	t.Helper()
	var ids []string
	for {
		got, err := lot.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %v: %v", ids, err)
		}
		if len(got) == 0 {
			return ids
		}
		for _, l := range got {
			ids = append(ids, l.ID)
			if err := lot.Settle(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func noGroupLot(t *testing.T, addr string) *Kafka {
	t.Helper()
	lot, err := NewKafka(KafkaConfig{Brokers: []string{addr}, DeadLetterTopic: "orders-dlt", Idle: 300 * time.Millisecond, NoGroup: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lot.Close(context.Background()) })
	return lot
}

// A run with no group ends on an empty topic, and on a topic of
// several partitions some of them empty, having returned every letter.
func TestKafkaNoGroupEndsAtEndOffsets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		parts   int32
		letters []int32 // the partition of each letter
	}{
		{"empty topic", 1, nil},
		{"empty partitions", 4, nil},
		{"some partitions empty", 4, []int32{1, 1, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, cl := dltBroker(t, tc.parts)
			var want []string
			for i, p := range tc.letters {
				r := dlLetter(p, fmt.Sprintf("o-%d", i))
				if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
					t.Fatal(err)
				}
				want = append(want, fmt.Sprintf("orders-dlt/%d@%d", r.Partition, r.Offset))
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			got := drain(t, ctx, noGroupLot(t, addr))
			// Partitions are read in no set order; each in offset order.
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("letters %v, want %v", got, want)
			}
		})
	}
}

// Letters produced after the run began are not the run's: it neither
// returns them nor waits for them.
func TestKafkaNoGroupLeavesLettersAfterItsStart(t *testing.T) {
	addr, cl := dltBroker(t, 2)
	if err := cl.ProduceSync(t.Context(), dlLetter(0, "o-1")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	lot := noGroupLot(t, addr)
	first, err := lot.Next(ctx)
	if err != nil || len(first) != 1 {
		t.Fatalf("first Next: %d letters, %v; want the one letter", len(first), err)
	}
	for _, r := range []*kgo.Record{dlLetter(0, "o-2"), dlLetter(1, "o-3")} {
		if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if rest := drain(t, ctx, lot); len(rest) != 0 {
		t.Fatalf("the run returned %v, produced after it began", rest)
	}
}

// A run with no group commits nothing: letters it settled are still where
// a run of the redrive's group starts.
func TestKafkaNoGroupCommitsNothing(t *testing.T) {
	addr, cl := dltBroker(t, 2)
	for _, r := range []*kgo.Record{dlLetter(0, "o-1"), dlLetter(1, "o-2")} {
		if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lot := noGroupLot(t, addr)
	if got := drain(t, ctx, lot); len(got) != 2 {
		t.Fatalf("no-group run: letters %v, want 2", got)
	}
	if err := lot.Close(ctx); err != nil {
		t.Fatal(err)
	}
	grouped, err := NewKafka(KafkaConfig{Brokers: []string{addr}, DeadLetterTopic: "orders-dlt", Idle: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = grouped.Close(ctx) }()
	if got := drain(t, ctx, grouped); len(got) != 2 {
		t.Fatalf("the group's run after a no-group run: letters %v, want both still there", got)
	}
}

// txLetters writes a letter to partition 0 in a transaction for each of
// ends, ended as it says.
func txLetters(t *testing.T, addr string, ends ...kgo.TransactionEndTry) {
	t.Helper()
	tx, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("orders-worker"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	for _, end := range ends {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := tx.ProduceSync(t.Context(), dlLetter(0, fmt.Sprint(end))).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := tx.EndTransaction(t.Context(), end); err != nil {
			t.Fatal(err)
		}
	}
}

// A dead-letter topic written in transactions (a transactional source
// dead-letters in its transaction): a partition's end offset is past its
// last letter, at the commit marker no read returns. The run returns the
// letter and ends.
func TestKafkaNoGroupTransactionalTopicEnds(t *testing.T) {
	addr, _ := dltBroker(t, 1)
	txLetters(t, addr, kgo.TryCommit)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if got := drain(t, ctx, noGroupLot(t, addr)); len(got) != 1 || got[0] != "orders-dlt/0@0" {
		t.Fatalf("letters %v, want the one (orders-dlt/0@0)", got)
	}
}

// A letter whose transaction was aborted was never set aside: the run does
// not list it.
func TestKafkaNoGroupAbortedLetterNotListed(t *testing.T) {
	addr, cl := dltBroker(t, 1)
	txLetters(t, addr, kgo.TryAbort)
	last := dlLetter(0, "o-1")
	if err := cl.ProduceSync(t.Context(), last).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	want := fmt.Sprintf("orders-dlt/0@%d", last.Offset)
	if got := drain(t, ctx, noGroupLot(t, addr)); len(got) != 1 || got[0] != want {
		t.Fatalf("letters %v, want %s alone: the aborted letter at 0 was never set aside", got, want)
	}
}
