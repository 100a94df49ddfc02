// Command rssbench runs the consumer over a given number of messages (the
// memory source and store, a no-op handler, a fixed MaxInFlight) in its
// own process and prints its peak resident memory, as a line `go test
// -bench` would print, so that benchtable reads it beside the benchmarks:
//
//	rssbench -messages 1000000
//	BenchmarkRSS/messages=1000000  1  <ns> ns/op  <MB> peak_rss_MB  <n> msgs/s
//
// The source is fed as it drains and records are swept as they expire (on
// a clock that advances with the work), so what grows with the message
// count would be the consumer's own memory.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/sources/memsource"
)

type config struct {
	messages    int
	workers     int
	maxInFlight int
}

type result struct {
	acked   int
	elapsed time.Duration
	peakKB  int64
}

func main() {
	var cfg config
	flag.IntVar(&cfg.messages, "messages", 100000, "messages to process")
	flag.IntVar(&cfg.workers, "workers", 16, "consumer Concurrency")
	flag.IntVar(&cfg.maxInFlight, "max-in-flight", 1024, "consumer MaxInFlight")
	flag.Parse()
	res, err := run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rssbench:", err)
		os.Exit(1)
	}
	fmt.Printf("BenchmarkRSS/messages=%d\t1\t%d ns/op\t%.1f peak_rss_MB\t%.0f msgs/s\n",
		cfg.messages, res.elapsed.Nanoseconds(), float64(res.peakKB)/1024, float64(res.acked)/res.elapsed.Seconds())
}

// workClock advances one second per acksPerSecond messages acked, so
// records expire at the pace of the work whatever the machine's speed.
type workClock struct {
	base    time.Time
	seconds atomic.Int64
}

func (c *workClock) Now() time.Time {
	return c.base.Add(time.Duration(c.seconds.Load()) * time.Second)
}

const (
	acksPerSecond = 2000 // virtual seconds advance per this many acks
	backlog       = 4096 // messages kept ready in the source
	body          = 256  // bytes per message
)

func run(ctx context.Context, cfg config) (result, error) {
	if cfg.messages < 1 || cfg.workers < 1 || cfg.maxInFlight < cfg.workers {
		return result{}, errors.New("need messages ≥ 1, workers ≥ 1, max-in-flight ≥ workers")
	}
	q, err := memsource.NewQueue("rss")
	if err != nil {
		return result{}, err
	}
	store, err := memstore.New()
	if err != nil {
		return result{}, err
	}
	clk := &workClock{base: time.Now()}
	resp := []byte("ok")
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Response: resp}, nil
	})
	// The shortest lease and retention allowed, on the work clock: a record
	// lives for about 4×acksPerSecond messages after its own.
	c, err := consumer.New(q.Source(), store, h, consumer.Concurrency(cfg.workers), consumer.MaxInFlight(cfg.maxInFlight),
		consumer.WithClock(clk), consumer.HandlerTimeout(time.Second), consumer.LeaseTTL(3*time.Second), consumer.Retention(4*time.Second))
	if err != nil {
		return result{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- c.Run(runCtx) }()

	sent, swept := 0, 0
	msg := make([]byte, body)
	for {
		st := q.Stats()
		if st.Acked+st.DeadLettered >= cfg.messages {
			break
		}
		for ; sent < cfg.messages && st.Ready < backlog; sent, st.Ready = sent+1, st.Ready+1 {
			copy(msg, strconv.Itoa(sent)+" ")
			if err := q.Send(ctx, memsource.Outgoing{Body: append([]byte(nil), msg...)}); err != nil {
				cancel()
				<-done
				return result{}, err
			}
		}
		if s := int64(st.Acked / acksPerSecond); s > clk.seconds.Load() {
			clk.seconds.Store(s)
		}
		if st.Acked-swept >= acksPerSecond {
			store.Sweep(clk.Now())
			swept = st.Acked
		}
		select {
		case err := <-done:
			return result{}, fmt.Errorf("consumer stopped early: %v", err)
		case <-time.After(200 * time.Microsecond):
		}
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		return result{}, err
	}
	st := q.Stats()
	if st.DeadLettered != 0 {
		return result{}, fmt.Errorf("%d messages dead-lettered", st.DeadLettered)
	}
	peak, err := peakRSS()
	if err != nil {
		return result{}, err
	}
	return result{acked: st.Acked, elapsed: elapsed, peakKB: peak}, nil
}

// peakRSS is the process's peak resident set in KiB: VmHWM from
// /proc/self/status, or getrusage where there is no procfs.
func peakRSS() (int64, error) {
	if f, err := os.Open("/proc/self/status"); err == nil {
		defer f.Close()
		if kb, err := vmHWM(f); err == nil {
			return kb, nil
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return ru.Maxrss, nil // KiB on Linux
}

func vmHWM(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no VmHWM line")
}
