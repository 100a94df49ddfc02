package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	fkgo "github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/onceq/onceq/examples/storehistory"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// Batch mode over both Kafka clients and the memory store: the fixture's
// orders, duplicates among them (same key, new record), reserved exactly
// once; the scarce and the malformed ones dead-lettered while their
// neighbours commit.
func TestWorkerBatchMode(t *testing.T) {
	for _, source := range []string{"kafka", "franz"} {
		t.Run(source, func(t *testing.T) {
			f := newOrderFixture()
			malformed := []string{`not json`, `{"order_id":"m-1","sku":"sku-1","qty":-3}`, ``}
			addr, _ := orderTopic(t, f, malformed)
			history := filepath.Join(t.TempDir(), "worker.offsets")

			opts, err := parseFlags([]string{"-source", source, "-kafka-brokers", addr, "-store", "memory", "-batch", "-batch-size", "50",
				"-progress", "1h", "-metrics-addr", "", "-history", history}, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			opts.meters = noop.NewMeterProvider()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			logger := slog.New(slog.DiscardHandler)
			wi, err := wire(ctx, opts, logger)
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			var stderr bytes.Buffer
			go func() { done <- workBatch(runCtx, opts, wi, logger, opts.meters, &stderr) }()
			wantRows := f.unique - f.scarce
			testenv.Eventually(t, time.Minute, "every accepted order reserved", func() bool {
				_, rows, _ := wi.totals(ctx)
				return rows >= wantRows
			})
			// The scarce orders (their writes' condition refused) and the
			// malformed ones are dead-lettered, each once.
			cl, err := fkgo.NewClient(fkgo.SeedBrokers(addr), fkgo.ConsumeTopics("orders-dlq"),
				fkgo.ConsumeResetOffset(fkgo.NewOffset().AtStart()), fkgo.FetchMaxWait(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			dead := map[string]int{}
			for n := 0; n < f.scarce+len(malformed); {
				fs := cl.PollFetches(ctx)
				if ctx.Err() != nil {
					t.Fatalf("dead letters %v: %v", dead, ctx.Err())
				}
				for _, r := range fs.Records() {
					dead[string(r.Value)]++
					n++
				}
			}
			for _, body := range append(f.bodies[:f.scarce:f.scarce], malformed...) {
				if dead[body] != 1 {
					t.Errorf("%q dead-lettered %d times, want once", body, dead[body])
				}
			}
			stop()
			if err := <-done; err != nil {
				t.Fatalf("workBatch: %v", err)
			}
			reserved, rows, err := wi.totals(ctx)
			if err != nil || reserved != f.wantReserved || rows != wantRows {
				t.Fatalf("reserved %d units over %d orders (%v), want %d over %d", reserved, rows, err, f.wantReserved, wantRows)
			}
			checkOffsetsHistory(t, history)
		})
	}
}

// checkOffsetsHistory checks what -history recorded under -batch: calls
// on the offset rows only, each returned, a partition acquired and
// batches committed under its token.
func checkOffsetsHistory(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	open := map[int64]storehistory.Event{}
	tokens := map[string]int64{} // by partition, from its Acquire
	acquired, committed := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e storehistory.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		switch {
		case e.Kind == storehistory.KindCall && (e.Op == storehistory.OpAcquire || e.Op == storehistory.OpCommit || e.Op == storehistory.OpOffset):
			open[e.ID] = e
		case e.Kind == storehistory.KindReturn && e.Outcome == storehistory.OutcomeOK:
			call, ok := open[e.ID]
			delete(open, e.ID)
			switch {
			case !ok:
				t.Fatalf("return %+v of no open call", e)
			case call.Op == storehistory.OpAcquire:
				acquired++
				tokens[call.Key] = e.Token
			case call.Op == storehistory.OpCommit && call.Token == tokens[call.Key] && call.Next > call.From:
				committed++
			}
		case e.Kind == storehistory.KindReturn:
			delete(open, e.ID)
		default:
			t.Fatalf("event %+v is no offset-row call", e)
		}
	}
	if acquired == 0 || committed == 0 || len(open) != 0 {
		t.Fatalf("%d acquires, %d commits under their token, %d calls never returned", acquired, committed, len(open))
	}
}
