package main

import (
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/onceq/onceq/consumer
cpu: AMD EPYC
BenchmarkMemoryPipeline/workers=16-2         	  300000	      2500 ns/op	    400000 msgs/s	     512 B/op	       9 allocs/op
BenchmarkMemoryPipeline/workers=16-2         	  300000	      2100 ns/op	    476190 msgs/s	     512 B/op	       8 allocs/op
BenchmarkMemoryPipeline/workers=16-2         	  300000	      3000 ns/op	    333333 msgs/s	     512 B/op	      10 allocs/op
BenchmarkDynamoDB/Ratios
    bench_test.go:99: some log line 12 34
BenchmarkDynamoDB/Ratios-2   	1	0 ns/op	0.91 claim+complete/put+update
BenchmarkDynamoDB/Ratios-2   	1	0 ns/op	0.85 claim+complete/put+update
PASS
ok  	github.com/onceq/onceq/consumer	12.3s
`

func TestParseMedians(t *testing.T) {
	r, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if r.CPU != "AMD EPYC" {
		t.Fatalf("cpu %q", r.CPU)
	}
	cases := []struct {
		name, unit string
		want       float64
		runs       int
	}{
		{"BenchmarkMemoryPipeline/workers=16", "ns/op", 2500, 3},
		{"BenchmarkMemoryPipeline/workers=16", "allocs/op", 9, 3},
		{"BenchmarkMemoryPipeline/workers=16", "msgs/s", 400000, 3},
		{"BenchmarkDynamoDB/Ratios", "claim+complete/put+update", 0.88, 2}, // even count: mean of the middle two
	}
	for _, c := range cases {
		v, n, ok := r.Median(c.name, c.unit)
		if !ok || n != c.runs || strconv.FormatFloat(v, 'f', 6, 64) != strconv.FormatFloat(c.want, 'f', 6, 64) {
			t.Errorf("%s %s: %v over %d runs (ok %v), want %v over %d", c.name, c.unit, v, n, ok, c.want, c.runs)
		}
	}
	if _, _, ok := r.Median("BenchmarkMemoryPipeline/workers=1", "ns/op"); ok {
		t.Error("a benchmark never run has a median")
	}
	if _, ok := r.Values["BenchmarkDynamoDB/Ratios"]["log"]; ok {
		t.Error("a log line was read as a result")
	}
}

func TestParseJoinsSplitResultLines(t *testing.T) {
	out := "BenchmarkCapacity/Fixed-2         \t2026/12/03 11:16:39 WARN giving up attempts=8\n" +
		"2026/12/03 11:16:40 WARN giving up attempts=8\n" +
		"       1\t24662084998 ns/op\t       132.9 msgs/s\t  47.24 throttled_%\n" +
		"BenchmarkCapacity/Adaptive-2 \t 1\t21664799471 ns/op\t 157.8 msgs/s\n"
	r, err := Parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if v, _, ok := r.Median("BenchmarkCapacity/Fixed", "throttled_%"); !ok || v != 47.24 {
		t.Fatalf("split line: throttled %v (ok %v), values %v", v, ok, r.Values)
	}
	if v, _, ok := r.Median("BenchmarkCapacity/Adaptive", "msgs/s"); !ok || v != 157.8 {
		t.Fatalf("next line: msgs/s %v (ok %v)", v, ok)
	}
}

func TestParseRejectsGarbledValues(t *testing.T) {
	_, err := Parse(strings.NewReader("BenchmarkX-2 \t 10 \t 12x ns/op\n"))
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line != 1 {
		t.Fatalf("garbled value: %v, want a ParseError at line 1", err)
	}
}

func TestTableMarksTargets(t *testing.T) {
	r, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	rows := []Row{
		{Label: "fast path", Onceq: Fig{"BenchmarkMemoryPipeline/workers=16", "msgs/s"}, Target: AtLeast(500000)},
		{Label: "allocs", Onceq: Fig{"BenchmarkMemoryPipeline/workers=16", "allocs/op"}, Target: AtMost(9)},
		{Label: "ratio", Ratio: Fig{"BenchmarkDynamoDB/Ratios", "claim+complete/put+update"}, Target: AtLeast(0.8)},
		{Label: "missing", Onceq: Fig{"BenchmarkNope", "msgs/s"}, Target: AtLeast(1)},
	}
	got := Render(r, rows)
	want := []string{
		"| fast path | 400000 |  |  | ≥ 500000 | missed |",
		"| allocs | 9 |  |  | ≤ 9 | met |",
		"| ratio |  |  | 0.88 | ≥ 0.8 | met |",
		"| missing | not run |  |  | ≥ 1 | not run |",
	}
	for _, w := range want {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("table lacks %q:\n%s", w, got)
		}
	}
}

func TestWithin(t *testing.T) {
	tg := Within(0.2)
	for _, c := range []struct {
		v    float64
		want bool
	}{{1.0, true}, {1.19, true}, {0.81, true}, {1.25, false}, {0.7, false}} {
		if got := tg.Met(c.v); got != c.want {
			t.Errorf("within 20%% of 1: %v gave %v", c.v, got)
		}
	}
}

func TestNoRatioJudgesOnceq(t *testing.T) {
	r, err := Parse(strings.NewReader("BenchmarkCap/Adaptive-2 1 0 ns/op 2 throttled_%\nBenchmarkCap/Fixed-2 1 0 ns/op 40 throttled_%\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := Render(r, []Row{{Label: "throttled", Onceq: Fig{"BenchmarkCap/Adaptive", "throttled_%"}, Raw: Fig{"BenchmarkCap/Fixed", "throttled_%"}, NoRatio: true, Target: AtMost(5)}})
	if w := "| throttled | 2 | 40 |  | ≤ 5 | met |\n"; !strings.Contains(got, w) {
		t.Fatalf("table lacks %q:\n%s", w, got)
	}
}

func TestMarkdownCarriesProfile(t *testing.T) {
	dir := t.TempDir()
	in, prof, md := dir+"/bench.out", dir+"/top.txt", dir+"/BENCHMARKS.md"
	top := "      flat  flat%   sum%        cum   cum%\n     0.24s  6.96%  6.96%      0.24s  6.96%  internal/runtime/maps.ctrlGroup.matchH2\n"
	if err := os.WriteFile(in, []byte(sample+"BenchmarkCachedDuplicates-2 \t 1000 \t 500 ns/op \t 0 store-calls/msg \t 0 allocs/op\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prof, []byte(top), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(&out, []string{in}, md, "make bench", "", prof, extras{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "```\n"+top+"```\n") {
		t.Fatalf("the profile is not under the table:\n%s", b)
	}
	if !strings.Contains(out.String(), "| cached duplicates: store calls/msg | 0 |  |  | = 0 | met |") {
		t.Fatalf("no cached-duplicate row:\n%s", out.String())
	}
}

// A rewrite keeps the sections measured apart from the table (the
// constructions' figures) and replaces the table.
func TestMarkdownKeepsSections(t *testing.T) {
	dir := t.TempDir()
	in, md := dir+"/bench.out", dir+"/BENCHMARKS.md"
	kept := "\n## Constructions\n\n| construction | measured |\n|---|---|\n| shared deadlines | 0 allocs |\n"
	if err := os.WriteFile(md, []byte("# Benchmarks\n\nan old table\n"+kept), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(io.Discard, []string{in}, md, "make bench", "", "", extras{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); !strings.HasSuffix(got, kept) || strings.Contains(got, "an old table") || strings.Count(got, "## Constructions") != 1 {
		t.Fatalf("the rewrite did not keep the sections once and replace the rest:\n%s", got)
	}
}

// BenchmarkDynamoDB prints one line per mode with every side's figures;
// the table reads each mode's rows from it.
func TestDynamoRows(t *testing.T) {
	line := "BenchmarkDynamoDB/ClaimComplete-2             \t       1\t         1.000 calls/msg\t         1.112 cpu_vs_min\t         1.073 cpu_vs_own\t         1.000 min_calls/msg\t       411.1 min_cpu-us/op\t      1277 min_msgs/s\t       457.3 onceq_cpu-us/op\t      1179 onceq_msgs/s\t         1.000 own_calls/msg\t       426.0 own_cpu-us/op\t      1204 own_msgs/s\t         0.9226 vs_min\t         0.9789 vs_own\n"
	r, err := Parse(strings.NewReader(line))
	if err != nil {
		t.Fatal(err)
	}
	got := Render(r, dynamoRows("ClaimComplete", "one round trip", 1))
	for _, w := range []string{
		"| DynamoDB one round trip: msgs/s, onceq vs minimal hand-written | 1179 | 1277 | 0.92 | ≥ 0.9 | met |",
		"| DynamoDB one round trip: msgs/s, onceq vs its own request by hand | 1179 | 1204 | 0.98 | ≥ 0.95 | met |",
		"| DynamoDB one round trip: client CPU µs/msg, onceq vs its own request by hand | 457 | 426 | 1.07 | ≤ 1.1 | met |",
		"| DynamoDB one round trip: client CPU µs/msg, onceq vs minimal hand-written | 457 | 411 | 1.11 |  |  |",
		"| DynamoDB one round trip: calls per unique message (onceq vs minimal) | 1 | 1 |  | = 1 | met |",
	} {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("table lacks %q:\n%s", w, got)
		}
	}
	n := 0
	for _, row := range rows {
		if strings.HasPrefix(row.Onceq.Bench, ddb) {
			n++
		}
	}
	if n != 4*5+1 {
		t.Errorf("%d DynamoDB rows, want 5 for each of 4 modes and the duplicate's", n)
	}
}

// BenchmarkPostgres and BenchmarkRedis print one line per mode
// (internal/testsupport/sidebyside); the table reads three rows from each.
func TestStoreRows(t *testing.T) {
	line := "BenchmarkPostgres/ClaimThenComplete-2         \t       1\t         1.029 cpu_vs_min\t         2.000 min_calls/msg\t        59.57 min_cpu-us/op\t      9552 min_msgs/s\t         2.000 onceq_calls/msg\t        61.39 onceq_cpu-us/op\t      9133 onceq_msgs/s\t         1.006 vs_min\n"
	r, err := Parse(strings.NewReader(line))
	if err != nil {
		t.Fatal(err)
	}
	got := Render(r, sqlRows("PostgreSQL", pg+"ClaimThenComplete", "claim+complete", 2))
	for _, w := range []string{
		"| PostgreSQL claim+complete: msgs/s, onceq vs minimal hand-written | 9133 | 9552 | 1.01 | ≥ 0.9 | met |",
		"| PostgreSQL claim+complete: client CPU µs/msg, onceq vs minimal hand-written | 61.4 | 59.6 | 1.03 |  |  |",
		"| PostgreSQL claim+complete: calls per unique message (onceq vs minimal) | 2 | 2 |  | = 2 | met |",
	} {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("table lacks %q:\n%s", w, got)
		}
	}
	n := map[string]int{}
	for _, row := range rows {
		for _, b := range []string{pg, rds} {
			if strings.HasPrefix(row.Onceq.Bench, b) {
				n[b]++
			}
		}
	}
	if n[pg] != 4*3 || n[rds] != 2*3 {
		t.Errorf("%d PostgreSQL and %d Redis rows, want 3 for each of 4 and 2 modes", n[pg], n[rds])
	}
}

// A -cpu 1,2 run keeps each GOMAXPROCS apart, and the scaling row is the
// 2-core median over the 1-core one; the lock-delay row reads the top
// entry's share from the mutex profile's text.
func TestScalingAndMutexRows(t *testing.T) {
	dir := t.TempDir()
	in, scaling, mutex := dir+"/bench.out", dir+"/scaling.out", dir+"/mutex.top"
	out := "BenchmarkMemoryPipeline/workers=16 \t 1000 \t 100 msgs/s\n" +
		"BenchmarkMemoryPipeline/workers=16-2 \t 1000 \t 190 msgs/s\n" +
		"BenchmarkMemoryPipeline/workers=16 \t 1000 \t 100 msgs/s\n" +
		"BenchmarkMemoryPipeline/workers=16-2 \t 1000 \t 170 msgs/s\n" +
		"BenchmarkPipelineControl/handoff \t 1000 \t 200 msgs/s \t 5 cpu-us/msg\n" +
		"BenchmarkPipelineControl/handoff-2 \t 1000 \t 300 msgs/s \t 5 cpu-us/msg\n" +
		"BenchmarkPipelineControl/parallel \t 1000 \t 200 msgs/s \t 5 cpu-us/msg\n" +
		"BenchmarkPipelineControl/parallel-2 \t 1000 \t 390 msgs/s \t 5 cpu-us/msg\n"
	top := "      flat  flat%   sum%        cum   cum%\n  142.77ms 63.71% 63.71%   142.77ms 63.71%  dedup/cache.(*Store).hit\n"
	for name, text := range map[string]string{in: sample, scaling: out, mutex: top} {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	if err := run(&b, []string{in}, "", "make bench", "", "", extras{scaling: scaling, mutex: mutex}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| memory, 16 workers: msgs/s, 2 cores vs 1 (-cpu 1,2, same run) | 180 | 100 | 1.8 | ≥ 1.8 | met |",
		"| control, the memory pipeline's shape without onceq (a channel hand-off to 16 workers): msgs/s, 2 cores vs 1 (same run) | 300 | 200 | 1.5 |  |  |",
		"| control, the same work on every core, no hand-off: msgs/s, 2 cores vs 1 (same run) | 390 | 200 | 1.95 |  |  |",
		"| memory, 16 workers: largest share of lock delay, % (one function) | 63.7 |  |  | ≤ 20 | missed |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// The per-core table (integration/bench-cores.sh) puts each core count in
// a column of its own and scales each throughput by its 1-core figure.
func TestRenderByCPU(t *testing.T) {
	out := "BenchmarkMemoryPipeline/workers=16 \t 10 \t 100 msgs/s \t 5 cpu-us/msg\n" +
		"BenchmarkMemoryPipeline/workers=16-4 \t 10 \t 300 msgs/s \t 6 cpu-us/msg\n" +
		"BenchmarkPipelineControl/parallel \t 10 \t 200 msgs/s \t 5 cpu-us/msg\n" +
		"BenchmarkPipelineControl/parallel-4 \t 10 \t 760 msgs/s \t 5 cpu-us/msg\n" +
		"BenchmarkGroupThroughput \t 1 \t 50 onceq_msgs/s \t 100 raw_msgs/s \t 0.5 ratio\n" +
		"BenchmarkGroupThroughput-4 \t 1 \t 160 onceq_msgs/s \t 200 raw_msgs/s \t 0.8 ratio\n"
	res, err := ParseByCPU(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	got := RenderByCPU(res)
	for _, want := range []string{
		"| measure | 1 | 4 |\n",
		"| memory pipeline, 16 workers: msgs/s | 100 | 300 |\n| … over its 1-core figure | 1× | 3× |\n",
		"| Kafka (kafka-go): onceq msgs/s | 50 | 160 |\n| … over its 1-core figure | 1× | 3.2× |\n",
		"| Kafka (kafka-go): onceq ÷ raw | 0.5 | 0.8 |\n",
		"| control, the same work on every core, no hand-off: msgs/s | 200 | 760 |\n| … over its 1-core figure | 1× | 3.8× |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}
