package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// -redrive runs the pipeline (the outbox's DEAD entries are its), on SQS,
// kafka-go or franz-go, and on neither a share group, batch mode nor
// transactions.
func TestRedriveFlags(t *testing.T) {
	t.Setenv("ONCEQ_DYNAMODB_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("ONCEQ_SQS_ENDPOINT", "http://127.0.0.1:1")
	for _, args := range [][]string{
		{"-redrive", "-source", "share"},
		{"-redrive", "-source", "kafka", "-batch"},
		{"-redrive", "-source", "franz", "-txn"},
		{"-redrive", "-redrive-delay", "-1s"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q: accepted", strings.Join(args, " "))
		}
	}
	for _, src := range []string{"sqs", "kafka", "franz"} {
		cfg, err := parseFlags([]string{"-redrive", "-source", src, "-kill-every", "3s"}, io.Discard)
		if err != nil {
			t.Fatalf("-source %s: %v", src, err)
		}
		if !cfg.pipeline || cfg.redriveDelay != 12*time.Second {
			t.Fatalf("-source %s: pipeline %v, redrive delay %v; want the pipeline on and four -kill-every", src, cfg.pipeline, cfg.redriveDelay)
		}
	}
}

// The refuser refuses about a tenth of the entries, and sends half of
// those first; the choice is the entry ID's alone, so a redriven entry is
// chosen again.
func TestRefuserChoice(t *testing.T) {
	refused, sent := 0, 0
	for i := range 10_000 {
		id, _ := shipKey("o-" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strings.Repeat("y", i/26))
		r, s := chosen(id)
		if r2, s2 := chosen(id); r2 != r || s2 != s {
			t.Fatalf("%s: chosen %v,%v then %v,%v", id, r, s, r2, s2)
		}
		if r {
			refused++
			if s {
				sent++
			}
		}
	}
	if refused < 800 || refused > 1200 || sent < refused/3 || sent > 2*refused/3 {
		t.Fatalf("refused %d of 10000, sent %d of those: want about a tenth and half", refused, sent)
	}
}

// checkRedrive fails t unless res's redrives moved the parked letters and
// the refused entries back, and every order shipped exactly once.
func checkRedrive(t *testing.T, res *result) {
	t.Helper()
	r, p := res.redrive, res.pipeline
	t.Log(r.line())
	t.Log(p.line())
	// The copies sent before a refusal are not required among the
	// absorbed claims: a shipping worker that shipped the first copy
	// absorbs the second in its COMPLETED cache, with no store call for
	// the history to show. shipped exactly once (doubled=0) is the check.
	switch {
	case r.letters.runs != 3 || r.entries.runs != 3 || r.err != nil:
		t.Fatalf("redrive runs: %d of the letters, %d of the outbox, %v", r.letters.runs, r.entries.runs, r.err)
	case r.parked == 0 || r.letters.moved < r.parked:
		t.Fatalf("parked %d, moved %d: every parked letter must go back", r.parked, r.letters.moved)
	case r.refused == 0 || r.entries.moved < r.refused || r.deadLeft != 0:
		t.Fatalf("outbox: %d refused (of %d the refuser leased), %d requeued, %d left DEAD: every refused entry must go back", r.refused, r.refuserLeased, r.entries.moved, r.deadLeft)
	case p.lost != 0 || p.doubled != 0 || p.outboxPending != 0 || p.shipped != res.unique:
		t.Fatalf("shipping: %s", p.line())
	}
}

// The short redrive runs, on SQS and then on Kafka (franz-go), the
// binaries built once for both: parked dead letters and refused outbox
// entries redriven twice at once and once more, while workers, relays
// and shipping workers are killed. On Kafka the two runs at once share a
// consumer group, and the third reads the topic from its start in a group
// of its own: it looks at every letter again.
func TestChaosShortRedrive(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs: start a broker, build and kill worker processes")
	}
	besideOthers(t, testenv.DynamoDBEndpoint, testenv.SQSEndpoint)
	dir := t.TempDir()
	bins := map[string]string{"worker-bin": "examples/order-worker", "onceq-bin": "cmd/onceq", "kafkadev-bin": "examples/kafkadev"}
	var wg sync.WaitGroup
	errs := make(chan error, len(bins))
	args := []string{"-redrive", "-redrive-delay", "1s", "-orders", "300", "-relays", "1", "-ship-workers", "1", "-timeout", "5m"}
	for flag, pkg := range bins {
		out := filepath.Join(dir, filepath.Base(pkg))
		args = append(args, "-"+flag, out)
		wg.Go(func() { errs <- goBuild(context.Background(), out, "github.com/onceq/onceq/"+pkg) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Run("sqs", func(t *testing.T) { checkRedrive(t, shortRun(t, append(args, "-source", "sqs")...)) })
	t.Run("kafka", func(t *testing.T) { checkRedrive(t, shortRun(t, append(args, "-source", "franz")...)) })
}
