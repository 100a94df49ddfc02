// Package sidebyside measures a store beside the minimal hand-written
// client doing the same job, in one benchmark run: the two sides take
// turns in rounds of a fixed time (the order alternating), each with the
// same operations in flight, and every ratio is the median of the rounds'
// own ratios, so a machine whose load drifts moves it little (Run).
// Sides that each move a fixed amount of work, such as a consumer reading
// a topic to its end, take turns by whole passes instead (Alternate).
// Only benchmarks import it.
package sidebyside

import (
	"context"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testsupport/proccpu"
)

// Side does one message's job once (a fresh key each call).
type Side func(ctx context.Context) error

// Options size a run; zero fields take the defaults.
type Options struct {
	Workers int           // operations in flight; default 32
	Rounds  int           // rounds per side; default 8
	Round   time.Duration // one round; default 200ms
	// Calls, when set, reads a count of the calls both sides make to the
	// server (a client hook's): the sides never run at once, so the count
	// between a round's start and end is that side's.
	Calls func() int64
}

type stats struct {
	ops     int64
	elapsed time.Duration
	cpu     time.Duration
	calls   int64
}

func (s stats) rate() float64 { return float64(s.ops) / s.elapsed.Seconds() }

func (s stats) callsPerOp() float64 {
	if s.ops == 0 {
		return 0
	}
	return float64(s.calls) / float64(s.ops)
}

func (s stats) cpuPerOp() float64 {
	if s.ops == 0 {
		return 0
	}
	return float64(s.cpu) / float64(time.Microsecond) / float64(s.ops)
}

// Run measures onceq beside min and reports onceq_msgs/s, min_msgs/s,
// vs_min (onceq's rate over min's), onceq_cpu-us/op, min_cpu-us/op and
// cpu_vs_min, and with Options.Calls onceq_calls/msg and min_calls/msg.
// CPU is the whole process's (user and system): the server is
// another process, so it is the client's. One invocation runs its rounds
// whatever b.N is. In a CPU profile each side's goroutines carry the label
// side=onceq or side=min.
func Run(b *testing.B, o Options, onceq, min Side) {
	if o.Workers <= 0 {
		o.Workers = 32
	}
	if o.Rounds <= 0 {
		o.Rounds = 8
	}
	if o.Round <= 0 {
		o.Round = 200 * time.Millisecond
	}
	sides := [2]Side{onceq, min}
	for _, s := range sides { // warm up: connections, caches
		round(b, o, s, o.Round/4)
	}
	var total [2]stats
	rounds := make([][2]stats, o.Rounds)
	for r := range rounds {
		for i := range sides {
			s := (r + i) % 2
			var got stats
			pprof.Do(b.Context(), pprof.Labels("side", sideNames[s]), func(context.Context) { got = round(b, o, sides[s], o.Round) })
			rounds[r][s] = got
			total[s].ops += got.ops
			total[s].elapsed += got.elapsed
			total[s].cpu += got.cpu
			total[s].calls += got.calls
		}
	}
	ratio := func(f func(stats) float64) float64 {
		var rs []float64
		for _, r := range rounds {
			if d := f(r[1]); d > 0 {
				rs = append(rs, f(r[0])/d)
			}
		}
		if len(rs) == 0 {
			return 0
		}
		slices.Sort(rs)
		if n := len(rs); n%2 == 0 {
			return (rs[n/2-1] + rs[n/2]) / 2
		}
		return rs[len(rs)/2]
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(total[0].rate(), "onceq_msgs/s")
	b.ReportMetric(total[1].rate(), "min_msgs/s")
	b.ReportMetric(ratio(stats.rate), "vs_min")
	b.ReportMetric(total[0].cpuPerOp(), "onceq_cpu-us/op")
	b.ReportMetric(total[1].cpuPerOp(), "min_cpu-us/op")
	if total[1].cpu > 0 {
		b.ReportMetric(ratio(stats.cpuPerOp), "cpu_vs_min")
	}
	if o.Calls != nil {
		b.ReportMetric(total[0].callsPerOp(), "onceq_calls/msg")
		b.ReportMetric(total[1].callsPerOp(), "min_calls/msg")
	}
}

func round(b *testing.B, o Options, side Side, d time.Duration) stats {
	ctx := b.Context()
	var ops atomic.Int64
	var failed atomic.Pointer[error]
	calls := func() int64 { return 0 }
	if o.Calls != nil {
		calls = o.Calls
	}
	calls0, cpu0, start := calls(), proccpu.Used(), time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Go(func() {
			for time.Now().Before(deadline) && failed.Load() == nil {
				if err := side(ctx); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	s := stats{ops: ops.Load(), elapsed: time.Since(start), cpu: proccpu.Used() - cpu0, calls: calls() - calls0}
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	return s
}

// sideNames label the two sides' goroutines in a CPU profile.
var sideNames = [2]string{"onceq", "min"}

// Pass is one round of a side that moves a fixed amount of work once (a
// topic read from its start by a new group, a queue drained): it returns
// the messages it moved and the time they took, by its own clock (from
// its client's creation to its last commit, say).
type Pass func(b *testing.B) (msgs int64, took time.Duration)

// Alternate measures onceq beside min when a side is a whole pass, not an
// operation repeated for a time: rounds of the two taking turns, the side
// that goes first alternating, so drift in the machine's load falls on
// both. It reports onceq_msgs/s and min_msgs/s (each the median of its
// rounds' rates), vs_min (the median of the rounds' own ratios),
// slowest_vs_min (the lowest of them), onceq_cpu-us/op, min_cpu-us/op
// (the process's CPU per message over all rounds) and cpu_vs_min (the
// median of the rounds' CPU ratios). The process's CPU includes whatever
// else it runs during a pass (an in-process broker). In a CPU profile the
// goroutines each pass starts carry the label side=onceq or side=min.
func Alternate(b *testing.B, rounds int, onceq, min Pass) {
	if rounds <= 0 {
		rounds = 6
	}
	sides := [2]Pass{onceq, min}
	var total [2]stats
	rs := make([][2]stats, rounds)
	for r := range rs {
		for i := range sides {
			s := (r + i) % 2
			var n int64
			var took time.Duration
			cpu0 := proccpu.Used()
			// Labelled for a CPU profile: the goroutines a pass starts
			// carry its side (pprof -tagfocus side=onceq).
			pprof.Do(b.Context(), pprof.Labels("side", sideNames[s]), func(context.Context) { n, took = sides[s](b) })
			got := stats{ops: n, elapsed: took, cpu: proccpu.Used() - cpu0}
			rs[r][s] = got
			total[s].ops += got.ops
			total[s].cpu += got.cpu
		}
	}
	median := func(xs []float64) float64 {
		slices.Sort(xs)
		if n := len(xs); n%2 == 0 {
			return (xs[n/2-1] + xs[n/2]) / 2
		}
		return xs[len(xs)/2]
	}
	var rate [2][]float64
	var ratio, cpuRatio []float64
	for _, r := range rs {
		rate[0] = append(rate[0], r[0].rate())
		rate[1] = append(rate[1], r[1].rate())
		ratio = append(ratio, r[0].rate()/r[1].rate())
		if d := r[1].cpuPerOp(); d > 0 {
			cpuRatio = append(cpuRatio, r[0].cpuPerOp()/d)
		}
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(rate[0]), "onceq_msgs/s")
	b.ReportMetric(median(rate[1]), "min_msgs/s")
	b.ReportMetric(median(ratio), "vs_min")
	b.ReportMetric(slices.Min(ratio), "slowest_vs_min")
	b.ReportMetric(total[0].cpuPerOp(), "onceq_cpu-us/op")
	b.ReportMetric(total[1].cpuPerOp(), "min_cpu-us/op")
	if len(cpuRatio) > 0 {
		b.ReportMetric(median(cpuRatio), "cpu_vs_min")
	}
}
