package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/integration/history"
)

// With -txn a run has no store: txn worker processes (franztxn
// processors) read the inputs and commit each poll's outputs, -txn-outputs
// records per input, with the consumed offsets in one Kafka transaction.
// They are killed (a restart under the same transactional ID aborts the
// dead one's open transaction) or leave and rejoin; once the group has
// committed every input, a read_committed reader must see each input's
// outputs exactly once, in each input partition's order.

// txnWorkerPkg is the txn worker's package, built for the run.
const txnWorkerPkg = "github.com/onceq/onceq/integration/chaos/txnworker"

// txnOut is -txn's output topic.
func (b *kafkaBroker) txnOut() string { return "out-" + b.topic }

// txnRestartLine is what a txn worker logs when its processor stopped on
// a transaction error and it started a new one (txnworker's restartLine).
const txnRestartLine = "txnworker: the processor stopped on a transaction error"

// countInLogs counts the lines holding s in the files glob matches.
func countInLogs(glob, s string) (int, error) {
	paths, err := filepath.Glob(glob)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0, err
		}
		n += strings.Count(string(b), s)
	}
	return n, nil
}

// txnArgs are a txn worker's flags, less its transactional ID.
func (b *kafkaBroker) txnArgs(cfg settings) []string {
	return []string{"-brokers", b.addr, "-topic", b.topic, "-out", b.txnOut(), "-group", b.group,
		"-outputs", strconv.Itoa(cfg.txnOutputs), "-session-timeout", b.session.String(), "-heartbeat", "500ms"}
}

// txnID is worker slot i's transactional ID: the same across its
// restarts, so that a restart fences the killed process.
func txnID(suffix string, i int) string { return "chaos-txn-" + suffix + "-" + strconv.Itoa(i) }

// txnPlan makes -orders inputs, each its own ID (its record key and
// idempotency-key header).
func txnPlan(cfg settings) ([]delivery, map[string]int) {
	inputs := make(map[string]int, cfg.orders)
	ds := make([]delivery, 0, cfg.orders)
	for i := range cfg.orders {
		id := "in-" + strconv.Itoa(i)
		inputs[id] = cfg.txnOutputs
		ds = append(ds, delivery{body: fmt.Sprintf(`{"input_id":%q}`, id), key: id, id: id})
	}
	return ds, inputs
}

// runTxn is a -txn run.
func runTxn(ctx context.Context, cfg settings, logw io.Writer) (*result, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	rng := mrand.New(mrand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15))
	logf := func(format string, a ...any) { fmt.Fprintf(logw, "chaos: "+format+"\n", a...) }
	tmp, err := os.MkdirTemp("", "onceq-chaos-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "txnworker")
	if err := goBuild(ctx, bin, txnWorkerPkg); err != nil {
		return nil, err
	}
	sb := make([]byte, 4)
	_, _ = rand.Read(sb)
	suffix := hex.EncodeToString(sb)
	b, err := startKafka(ctx, cfg, tmp, suffix, logw)
	if err != nil {
		return nil, err
	}
	defer b.close()

	deliveries, inputs := txnPlan(cfg)
	res := &result{source: cfg.source + "-txn", messages: len(deliveries), unique: len(inputs)}
	pool := &pool{bin: bin, tmp: tmp, cfg: cfg, names: names{suffix: suffix}, brokerArgs: b.txnArgs(cfg), logw: logw}
	if err := pool.startAll(processes(cfg)); err != nil {
		return nil, err
	}
	if err := churn(ctx, cfg, rng, pool, b, deliveries, b.left, logf, res); err != nil {
		return res, err
	}

	if res.txnRestarts, err = countInLogs(filepath.Join(tmp, "worker-*.log"), txnRestartLine); err != nil {
		return res, err
	}
	// Every worker stopped, so no transaction is open: each output is
	// committed or aborted.
	visible, _, err := b.readOutputs(ctx, kgo.ReadCommitted())
	if err != nil {
		return res, err
	}
	_, written, err := b.readOutputs(ctx, kgo.ReadUncommitted())
	if err != nil {
		return res, err
	}
	r := history.CheckTxn(inputs, visible, written)
	res.txn = &r
	res.lost, res.doubled = r.Lost+r.Torn, r.Doubled+r.Phantom
	res.wall = time.Since(start)
	var problems []string
	if !r.OK() {
		problems = append(problems, fmt.Sprintf("transactions' history %s; lost %d, torn %d, doubled %d, phantom %d, out of order %d",
			r.Verdict(), r.Lost, r.Torn, r.Doubled, r.Phantom, r.OutOfOrder))
	}
	if res.workersExitedNonZero > 0 {
		problems = append(problems, fmt.Sprintf("%d workers failed on SIGTERM, the first: %s", res.workersExitedNonZero, res.stopError))
	}
	if len(problems) > 0 {
		return res, fmt.Errorf("%w: %s", ErrNotExactlyOnce, strings.Join(problems, "; "))
	}
	return res, nil
}

// readOutputs reads every partition of the output topic from its start to
// its end at isolation, and returns the outputs it holds (each parsed,
// with where it lies) and how many output records it read. Control
// records (the transactions' markers) are kept, and skipped here, so that
// the end is reached even when a partition's last record is one.
func (b *kafkaBroker) readOutputs(ctx context.Context, isolation kgo.IsolationLevel) ([]history.TxnOutput, int, error) {
	ends, err := b.ends(ctx, b.txnOut())
	if err != nil {
		return nil, 0, err
	}
	parts := map[int32]kgo.Offset{}
	pos := map[int32]int64{}
	for p, end := range ends {
		if end > 0 {
			parts[int32(p)] = kgo.NewOffset().AtStart()
			pos[int32(p)] = 0
		}
	}
	if len(parts) == 0 {
		return nil, 0, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.FetchIsolationLevel(isolation), kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{b.txnOut(): parts}), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, 0, err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var outs []history.TxnOutput
	n := 0
	for behind := len(parts); behind > 0; {
		fs := cl.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			return nil, 0, fmt.Errorf("read %s: %d partitions short of their end: %w", b.txnOut(), behind, err)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) { ferr = fmt.Errorf("read %s/%d: %w", b.txnOut(), p, err) })
		if ferr != nil {
			return nil, 0, ferr
		}
		var perr error
		fs.EachRecord(func(r *kgo.Record) {
			pos[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
			n++
			var o history.TxnOutput
			if err := json.Unmarshal(r.Value, &o); err != nil && perr == nil {
				perr = fmt.Errorf("%s/%d@%d: %w", b.txnOut(), r.Partition, r.Offset, err)
			}
			o.Partition, o.Offset = r.Partition, r.Offset
			outs = append(outs, o)
		})
		if perr != nil {
			return nil, 0, perr
		}
		behind = 0
		for p := range parts {
			if pos[p] < ends[int(p)] {
				behind++
			}
		}
	}
	return outs, n, nil
}
