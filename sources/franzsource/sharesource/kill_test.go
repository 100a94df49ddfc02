package sharesource_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource/sharesource"
)

// workerEnv, set to a broker address, makes the test binary a worker
// process (runWorker) instead of running tests.
const workerEnv = "SHARESOURCE_TEST_WORKER"

// A worker is SIGKILLed after it polled again (it completed a record
// produced after a slow handler started) and before that slow handler's
// commit. franz-go accepts, at a client's next poll, every record of its
// last poll not yet settled: had the source polled that client again, the
// slow record would be accepted, and the kill would lose it. It must come
// back, to the next worker, as a second delivery.
func TestKillBetweenNextPollAndSlowCommit(t *testing.T) {
	t.Parallel()
	addr := cluster(t)
	topic, group := topicName(t, "in"), topicName(t, "group")
	createTopic(t, addr, topic, 1)
	w := producer(t, addr, topic)
	ctx := testenv.Context(t, time.Minute)
	produce := func(body string) {
		t.Helper()
		if err := w.ProduceSync(ctx, &kgo.Record{Value: []byte(body)}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	produce("slow")

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+addr, "SHARESOURCE_TEST_TOPIC="+topic, "SHARESOURCE_TEST_GROUP="+group)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the worker: %v", err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	await := func(prefix string) string {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the worker exited before %q", prefix)
				}
				if strings.HasPrefix(l, prefix) {
					return l
				}
			case <-ctx.Done():
				t.Fatalf("the worker never said %q", prefix)
			}
		}
	}
	await("started slow")
	for i := range 4 {
		produce(fmt.Sprintf("fast-%d", i))
	}
	// A record produced after the slow one started completed: the worker
	// polled again while the slow handler held its record.
	got := await("completed fast-")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	_ = cmd.Wait()
	killed = true
	t.Logf("worker killed after %q, with the slow handler running", got)

	// The next worker gets the slow record again.
	src := newSource(t, addr, group, topic)
	var mu sync.Mutex
	deliveries := map[string]int{}
	seen := make(chan struct{})
	var once sync.Once
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		deliveries[string(m.Body)] = m.Deliveries
		if string(m.Body) == "slow" {
			once.Do(func() { close(seen) })
		}
		return consumer.Result{}, nil
	})
	c, err := consumer.New(src, memstoretest.New(t), h, consumer.WithoutDeadLetters())
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-seen:
	case <-ctx.Done():
		t.Fatal("the slow record never came back after the kill: it was accepted before its handler's commit")
	}
	mu.Lock()
	defer mu.Unlock()
	if d := deliveries["slow"]; d < 2 {
		t.Fatalf("the slow record came back as delivery %d, want at least 2", d)
	}
}

// runWorker is the worker process of TestKillBetweenNextPollAndSlowCommit:
// a consumer over a share-group source of two members, one record per
// poll, whose handler blocks on the record "slow". It prints "started
// slow" when that handler starts and "completed BODY" for each record
// settled after its COMPLETED commit.
func runWorker(addr string) int {
	ctx := context.Background()
	src, err := sharesource.New(ctx, []string{addr}, os.Getenv("SHARESOURCE_TEST_GROUP"), []string{os.Getenv("SHARESOURCE_TEST_TOPIC")},
		sharesource.FromEarliest(), sharesource.Members(2), sharesource.MaxRecords(1))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
		if string(m.Body) == "slow" {
			fmt.Println("started slow")
			<-ctx.Done()
			return consumer.Result{}, ctx.Err()
		}
		return consumer.Result{}, nil
	})
	store, err := memstore.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	c, err := consumer.New(src, store, h, consumer.WithoutDeadLetters(), consumer.WithHooks(printCompleted{}),
		consumer.HandlerTimeout(time.Hour), consumer.LeaseTTL(2*time.Hour))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

type printCompleted struct{}

func (printCompleted) OnMessageOutcome(_ context.Context, m *consumer.Message, o consumer.Outcome, _ time.Duration) {
	if o.Kind == consumer.Processed {
		fmt.Println("completed " + string(m.Body))
	}
}
