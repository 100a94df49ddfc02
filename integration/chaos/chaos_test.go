package main

import (
	"bytes"
	"context"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/onceq/onceq/internal/testsupport/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The SDK's idle keep-alive connections outlive a run by design.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// shortRun runs the driver with args and fails t unless every order was
// applied exactly once, every malformed one (12) is in the dead-letter
// queue and chaos did happen; the caller checks what differs by source.
// besideOthers checks that the servers a run takes from the environment
// are there (a skip, or a failure in CI), then lets the run go beside the
// other short runs: each has its own tables, queues and broker, and they
// spend most of their time waiting on kills, rebalances and leases. The
// environment is read, never set, by a run that goes beside others.
func besideOthers(t *testing.T, servers ...func(testing.TB) string) {
	t.Helper()
	for _, server := range servers {
		server(t)
	}
	t.Parallel()
}

func shortRun(t *testing.T, args ...string) *result {
	t.Helper()
	cfg, err := parseFlags(append(args, "-malformed", "12", "-kill-every", "4s", "-seed", "7"), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	res, err := run(context.Background(), cfg, &log)
	if res != nil {
		if res.history != nil {
			t.Log(res.history.Line())
		}
		t.Log(res.line())
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	switch {
	case res.lost != 0 || res.doubled != 0 || res.extra != 0 || res.pending != 0:
		t.Fatalf("not exactly once: %s", res.line())
	case res.history == nil || !res.history.OK() || res.history.Verdict() != "linearizable":
		t.Fatalf("history: %v", res.history)
	case res.unitsGot != res.unitsWant:
		t.Fatalf("reserved %d units, want %d", res.unitsGot, res.unitsWant)
	case res.dlqMissing != 0 || res.dlqUnseen != 0 || res.malformed != 12 || res.dlq != 12 || res.dlqCopies < 12:
		// At least once: a kill between the dead letter and the ack repeats it.
		t.Fatalf("dead letters: %d of 12 (%d copies), %d missing, %d unexpected", res.dlq, res.dlqCopies, res.dlqMissing, res.dlqUnseen)
	case res.kills+res.leaves == 0 || (cfg.store == "dynamodb" && res.throttles == 0):
		// A run that injected nothing proves nothing.
		t.Fatalf("no chaos happened: %s", res.line())
	}
	return res
}

// The short chaos run inside the suite: 2,000 orders over three worker
// processes, a kill every few seconds, throttles, 500s, resets and
// latency at DynamoDB; the tables must show every order exactly once.
func TestChaosShort(t *testing.T) {
	besideOthers(t, testenv.DynamoDBEndpoint, testenv.SQSEndpoint)
	res := shortRun(t, "-orders", "2000", "-timeout", "6m")
	if res.resets == 0 || res.duplicatesSuppressed != 400 {
		t.Fatalf("resets %d, duplicates suppressed %d (want 400): %s", res.resets, res.duplicatesSuppressed, res.line())
	}
}

// The short chaos run on Kafka: the loopback broker as its own process,
// three worker processes in one group that are killed, or leave and
// rejoin, every few seconds; the same checks, dead letters read back
// from the dead-letter topic.
func TestChaosShortKafka(t *testing.T) {
	besideOthers(t, testenv.DynamoDBEndpoint)
	if res := shortRun(t, "-source", "kafka", "-orders", "1500", "-timeout", "6m"); res.duplicatesSuppressed != 300 {
		t.Fatalf("duplicates suppressed %d, want 300", res.duplicatesSuppressed)
	}
}

// The short chaos run on the PostgreSQL store: 2,000 orders over three
// worker processes on SQS, a kill every few seconds; every reservation
// commits in its COMPLETED record's transaction, so the tables must show
// every order exactly once.
func TestChaosShortPostgres(t *testing.T) {
	besideOthers(t, testenv.PostgresURL, testenv.SQSEndpoint)
	if res := shortRun(t, "-store", "postgres", "-orders", "2000", "-timeout", "6m"); res.duplicatesSuppressed != 400 {
		t.Fatalf("duplicates suppressed %d, want 400: %s", res.duplicatesSuppressed, res.line())
	}
}

// The short Kafka-transactions run: three franztxn processes killed (each
// restart fences its dead one under the same transactional ID) or leaving
// and rejoining every few seconds; a read_committed reader must see each
// input's two outputs exactly once, in order, and the chaos must have
// aborted some transactions.
func TestChaosShortTxn(t *testing.T) {
	if testing.Short() {
		t.Skip("a chaos run: starts a broker, builds and kills worker processes")
	}
	besideOthers(t)
	cfg, err := parseFlags([]string{"-txn", "-source", "franz", "-orders", "300", "-kill-every", "2s", "-seed", "7", "-timeout", "4m"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	res, err := run(context.Background(), cfg, &log)
	if res != nil && res.txn != nil {
		t.Log(res.txn.Line())
		t.Log(res.line())
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	switch r := res.txn; {
	case r == nil || !r.OK() || r.Verdict() != "linearizable" || res.lost != 0 || res.doubled != 0:
		t.Fatalf("not exactly once: %v", r)
	case r.Inputs != 300 || r.Visible != 600:
		t.Fatalf("%d inputs, %d outputs visible; want 300 and 600", r.Inputs, r.Visible)
	case res.kills+res.leaves == 0:
		t.Fatalf("no chaos happened: %s", res.line())
	}
}

// The short batch-mode run: franz-go's batch source on the PostgreSQL
// store, three workers killed or leaving every few seconds; the tables
// must show every order once, and every partition's offset row must have
// been committed once per offset, in order, under rising tokens.
func TestChaosShortBatch(t *testing.T) {
	besideOthers(t, testenv.PostgresURL)
	res := shortRunBatch(t, "-source", "franz", "-batch", "-store", "postgres", "-orders", "300", "-timeout", "5m")
	if res.duplicatesSuppressed != 60 {
		t.Fatalf("duplicates suppressed %d, want 60: %s", res.duplicatesSuppressed, res.line())
	}
}

// shortRunBatch is shortRun for batch mode, whose history is the offset
// rows'.
func shortRunBatch(t *testing.T, args ...string) *result {
	t.Helper()
	cfg, err := parseFlags(append(args, "-malformed", "12", "-kill-every", "3s", "-seed", "7"), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	res, err := run(context.Background(), cfg, &log)
	if res != nil {
		if res.offsets != nil {
			t.Log(res.offsets.Line())
		}
		t.Log(res.line())
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	switch {
	case res.lost != 0 || res.doubled != 0 || res.extra != 0 || res.unitsGot != res.unitsWant:
		t.Fatalf("not exactly once: %s", res.line())
	case res.offsets == nil || !res.offsets.OK() || res.offsets.Verdict() != "linearizable" || res.offsets.Partitions != cfg.partitions:
		t.Fatalf("offsets history: %v", res.offsets)
	case res.dlqMissing != 0 || res.dlqUnseen != 0 || res.dlq != 12:
		t.Fatalf("dead letters: %d of 12, %d missing, %d unexpected", res.dlq, res.dlqMissing, res.dlqUnseen)
	case res.kills+res.leaves == 0:
		t.Fatalf("no chaos happened: %s", res.line())
	}
	return res
}
