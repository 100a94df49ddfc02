package franztxn_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/franztxn"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// killChildEnv, set, makes TestKillMidTransaction the worker process:
// broker, input topic, output topic, group, transactional ID and whether
// to stall mid-transaction, separated by spaces.
const killChildEnv = "FRANZTXN_KILL_CHILD"

const stalledLine = "franztxn-child-stalled"

// A worker process killed with SIGKILL while its transaction is open,
// its outputs written, and restarted under the same transactional ID:
// every input's outputs are read exactly once by a read_committed reader.
func TestKillMidTransaction(t *testing.T) {
	if args := os.Getenv(killChildEnv); args != "" {
		runChild(t, strings.Fields(args))
		return
	}
	addr := brokerAddr(t)
	in, out, group := names(t)
	createTopic(t, addr, in, 2)
	createTopic(t, addr, out, 2)
	const total, per = 300, 2
	produceInputs(t, addr, in, 0, total)
	committed := newReader(t, addr, out, true)
	uncommitted := newReader(t, addr, out, false)

	child := func(stall bool) (*exec.Cmd, *bufio.Scanner) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillMidTransaction$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s %s %s %t", killChildEnv, addr, in, out, group, group+"-w", stall))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start the worker: %v", err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		return cmd, bufio.NewScanner(stdout)
	}

	first, lines := child(true)
	stalled := make(chan bool, 1)
	go func() {
		for lines.Scan() {
			if lines.Text() == stalledLine {
				stalled <- true
				return
			}
		}
		stalled <- false
	}()
	select {
	case ok := <-stalled:
		if !ok {
			t.Fatal("the worker ended before it stalled")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the worker never stalled")
	}
	admin := client(t, addr)
	testenv.Eventually(t, 10*time.Second, "the open transaction's outputs written", func() bool {
		return openTransaction(t, admin, out, 2)
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	if first.ProcessState.Success() {
		t.Fatal("the worker exited on its own")
	}

	second, rest := child(false)
	go func() { // drain its output
		for rest.Scan() {
		}
	}()
	testenv.Eventually(t, 90*time.Second, "every output read", func() bool { return committed.outputs() >= total*per })
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Fatalf("the restarted worker: %v", err)
	}
	exactlyOnce(t, finish(t, addr, out, 2, committed), total, per)
	if n := uncommitted.outputs(); n <= total*per {
		t.Fatalf("read uncommitted %d outputs, want more than the %d committed: the killed transaction wrote some", n, total*per)
	}
}

// runChild is the worker process: it runs a Processor until SIGTERM, and
// when told to stall, blocks a handler mid-transaction (after some
// transactions committed and this one produced outputs) and says so on
// stdout.
func runChild(t *testing.T, a []string) {
	if len(a) != 6 {
		t.Fatalf("%s: %q", killChildEnv, a)
	}
	addr, in, out, group, txnID, stall := a[0], a[1], a[2], a[3], a[4], a[5] == "true"
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	c := &counter{}
	var handled atomic.Int32
	ok := fanOut(out, 2)
	h := consumer.HandlerFunc(func(hctx context.Context, m *consumer.Message) (consumer.Result, error) {
		if n, _, _, _ := c.get(); stall && n >= 2 && handled.Add(1) == 6 {
			fmt.Println(stalledLine)
			<-ctx.Done() // SIGKILL comes first
		}
		return ok.Handle(hctx, m)
	})
	opts := append(fast(), franztxn.MaxPollRecords(20), franztxn.Concurrency(1), franztxn.WithHooks(c), franztxn.WithLogger(testenv.Logger(t)))
	p, err := franztxn.New(ctx, []string{addr}, group, []string{in}, txnID, h, opts...)
	if err != nil {
		t.Fatalf("franztxn.New: %v", err)
	}
	if err := p.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
