// Command benchtable reads `go test -bench` output (and the same lines
// from the rssbench program), takes the median of each figure over its
// runs, and prints one Markdown table: each onceq figure beside its raw
// baseline, the ratio, the target and whether it was met. With -md it
// also writes the table, with the date, core count and command, to a file.
//
//	benchtable -md BENCHMARKS.md -cmd "make bench" bench.out
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

func main() {
	md := flag.String("md", "", "also write the table, date, cores and command to this Markdown file")
	cmd := flag.String("cmd", "make bench", "the command that produced the figures, for the Markdown file")
	note := flag.String("note", "", "a line to add under the table in the Markdown file")
	profile := flag.String("profile", "", "a file of profile text (pprof -top) to print under the table in the Markdown file")
	flag.Parse()
	if err := run(os.Stdout, flag.Args(), *md, *cmd, *note, *profile); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(out io.Writer, inputs []string, md, cmd, note, profile string) error {
	var readers []io.Reader
	for _, name := range inputs {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		readers = append(readers, f)
	}
	if len(readers) == 0 {
		readers = append(readers, os.Stdin)
	}
	res, err := Parse(io.MultiReader(readers...))
	if err != nil {
		return err
	}
	table := Render(res, rows)
	if _, err := io.WriteString(out, table); err != nil {
		return err
	}
	if md == "" {
		return nil
	}
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	fmt.Fprintf(&b, "Measured %s on %d cores", time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU())
	if res.CPU != "" {
		fmt.Fprintf(&b, " (%s)", res.CPU)
	}
	fmt.Fprintf(&b, ", %s, by `%s`. Each figure is the median of its runs in that one invocation; ", runtime.Version(), cmd)
	b.WriteString("each ratio is onceq over the raw client (or the other mode), measured in the same run.\n\n")
	b.WriteString(table)
	b.WriteString("\n" + legend)
	if note != "" {
		b.WriteString("\n" + note + "\n")
	}
	if profile != "" {
		text, err := os.ReadFile(profile)
		if err != nil {
			return err
		}
		b.WriteString("\n" + profileSection(string(text)))
	}
	return os.WriteFile(md, []byte(b.String()), 0o644)
}

// profileSection prints the memory pipeline's profile entries under the
// table: what bounds its throughput, from the same invocation.
func profileSection(top string) string {
	return "Where the memory pipeline (16 workers) spends its CPU, the top entries by own time (`go tool pprof -top -nodecount=5`, the producing of its messages left out):\n\n```\n" +
		strings.TrimRight(top, "\n") + "\n```\n"
}

const legend = `Rows:
- memory: the memory source and store, no-op handler (consumer BenchmarkMemoryPipeline); one op is one message, produced before the timer starts, so allocations and CPU count the consumer, the source's receive and settles and the store, not the producing. CPU µs per message is the process's CPU time (user and system) over the timed part, divided by the messages.
- cached duplicates: Guard.Process, from every core, of messages whose keys the COMPLETED cache holds (consumer BenchmarkCachedDuplicates); store calls are counted behind the cache.
- latency hiding: a handler sleeping 10 ms, 64 workers against 1 (consumer BenchmarkLatencyHiding).
- SQS: the fauxqs emulator, a raw ReceiveMessage(10) + DeleteMessageBatch loop against the consumer with the memory store, both 8-way (sources/sqssource BenchmarkRawVsConsumer).
- Kafka: the in-process kfake broker, 1 KiB records, a raw kafka-go group FetchMessage + CommitMessages loop against the consumer with the memory store (sources/kafkasource BenchmarkGroupThroughput). Its CPU per message is the whole process's, the in-process broker's included, on each side.
- Kafka, franz-go: the same topic shape, a raw franz-go PollFetches + CommitUncommittedOffsets loop against the consumer over sources/franzsource with the memory store (sources/franzsource BenchmarkFranzThroughput).
- DynamoDB: DynamoDB Local at 32-way concurrency, each store mode beside the raw client making the same calls; calls per message are counted by SDK middleware (dedup/dynamostore BenchmarkDynamoDB).
- capacity: the consumer with the DynamoDB store behind a fault proxy that throttles beyond 300 requests/s; "onceq" is the adaptive limiter (the default), "raw baseline" is FixedConcurrency with per-call backoff only (dedup/dynamostore BenchmarkCapacity).
- RSS: peak resident memory of a separate process per size (integration/rssbench), memory source and store, fixed MaxInFlight; "onceq" is 1M messages, "raw baseline" 100k.
`

const (
	mem   = "BenchmarkMemoryPipeline/workers=16"
	dup   = "BenchmarkCachedDuplicates"
	mem1  = "BenchmarkMemoryPipeline/workers=1"
	lat   = "BenchmarkLatencyHiding"
	sqs   = "BenchmarkRawVsConsumer"
	kafka = "BenchmarkGroupThroughput"
	franz = "BenchmarkFranzThroughput"
	ddb   = "BenchmarkDynamoDB/"
	capA  = "BenchmarkCapacity/Adaptive"
	capF  = "BenchmarkCapacity/Fixed"
	rss1  = "BenchmarkRSS/messages=100000"
	rss10 = "BenchmarkRSS/messages=1000000"
)

var rows = []Row{
	{Label: "memory, 16 workers: msgs/s", Onceq: Fig{mem, "msgs/s"}, Target: AtLeast(500000)},
	{Label: "memory, 16 workers: ns/msg", Onceq: Fig{mem, "ns/op"}},
	{Label: "memory, 16 workers: allocs/msg", Onceq: Fig{mem, "allocs/op"}, Target: AtMost(5)},
	{Label: "memory, 16 workers: CPU µs/msg", Onceq: Fig{mem, "cpu-us/msg"}},
	{Label: "memory, 1 worker: msgs/s", Onceq: Fig{mem1, "msgs/s"}},
	{Label: "memory, 1 worker: allocs/msg", Onceq: Fig{mem1, "allocs/op"}, Target: AtMost(5)},
	{Label: "memory, 1 worker: CPU µs/msg", Onceq: Fig{mem1, "cpu-us/msg"}},
	{Label: "cached duplicates: msgs/s", Onceq: Fig{dup, "msgs/s"}, Target: AtLeast(1000000)},
	{Label: "cached duplicates: allocs/msg", Onceq: Fig{dup, "allocs/op"}, Target: Equal(0)},
	{Label: "cached duplicates: store calls/msg", Onceq: Fig{dup, "store-calls/msg"}, Target: Equal(0)},
	{Label: "cached duplicates: CPU µs/msg", Onceq: Fig{dup, "cpu-us/msg"}},
	{Label: "latency hiding, 10 ms handler: msgs/s (64 workers vs 1)", Onceq: Fig{lat, "w64_msgs/s"}, Raw: Fig{lat, "w1_msgs/s"}, Ratio: Fig{lat, "ratio"}, Target: AtLeast(50)},
	{Label: "SQS (fauxqs), 8-way: msgs/s", Onceq: Fig{sqs, "onceq_msgs/s"}, Raw: Fig{sqs, "raw_msgs/s"}, Ratio: Fig{sqs, "ratio"}, Target: AtLeast(0.9)},
	{Label: "Kafka (kfake), 1 KiB: msgs/s", Onceq: Fig{kafka, "onceq_msgs/s"}, Raw: Fig{kafka, "raw_msgs/s"}, Ratio: Fig{kafka, "ratio"}, Target: AtLeast(0.8)},
	{Label: "Kafka (kfake), 1 KiB: CPU µs/msg, broker included", Onceq: Fig{kafka, "onceq_cpu-us/msg"}, Raw: Fig{kafka, "raw_cpu-us/msg"}},
	{Label: "Kafka (kfake) over franz-go, 1 KiB: msgs/s", Onceq: Fig{franz, "onceq_msgs/s"}, Raw: Fig{franz, "raw_msgs/s"}, Ratio: Fig{franz, "ratio"}},
	{Label: "DynamoDB claim+complete vs raw PutItem+UpdateItem: msgs/s", Onceq: Fig{ddb + "ClaimThenComplete", "msgs/s"}, Raw: Fig{ddb + "RawPutThenUpdate", "msgs/s"}, Ratio: Fig{ddb + "Ratios", "claim+complete/put+update"}, Target: AtLeast(0.8)},
	{Label: "DynamoDB transaction mode (claim, complete + 1 write) vs raw PutItem+TransactWriteItems(2): msgs/s", Onceq: Fig{ddb + "ClaimThenCompleteWith1Write", "msgs/s"}, Raw: Fig{ddb + "RawPutThenTransact2", "msgs/s"}, Ratio: Fig{ddb + "Ratios", "claim+complete+w/put+txn2"}, Target: AtLeast(0.8)},
	{Label: "DynamoDB one-round-trip vs raw conditional PutItem: msgs/s", Onceq: Fig{ddb + "ClaimComplete", "msgs/s"}, Raw: Fig{ddb + "RawConditionalPut", "msgs/s"}, Ratio: Fig{ddb + "Ratios", "claimcomplete/put"}, Target: AtLeast(0.8)},
	{Label: "DynamoDB one-round-trip + 1 write vs raw TransactWriteItems(2): msgs/s", Onceq: Fig{ddb + "ClaimCompleteWith1Write", "msgs/s"}, Raw: Fig{ddb + "RawTransact2", "msgs/s"}, Ratio: Fig{ddb + "Ratios", "claimcomplete+w/txn2"}, Target: AtLeast(0.8)},
	{Label: "DynamoDB calls per unique message, claim+complete", Onceq: Fig{ddb + "ClaimThenComplete", "calls/msg"}, Raw: Fig{ddb + "RawPutThenUpdate", "calls/msg"}, NoRatio: true, Target: Equal(2)},
	{Label: "DynamoDB calls per unique message, transaction mode", Onceq: Fig{ddb + "ClaimThenCompleteWith1Write", "calls/msg"}, Raw: Fig{ddb + "RawPutThenTransact2", "calls/msg"}, NoRatio: true, Target: Equal(2)},
	{Label: "DynamoDB calls per unique message, one-round-trip", Onceq: Fig{ddb + "ClaimComplete", "calls/msg"}, Raw: Fig{ddb + "RawConditionalPut", "calls/msg"}, NoRatio: true, Target: Equal(1)},
	{Label: "DynamoDB calls per duplicate (store, no cache)", Onceq: Fig{ddb + "Duplicate", "calls/msg"}, Target: Equal(1)},
	{Label: "capacity 300 req/s: msgs/s (adaptive vs fixed)", Onceq: Fig{capA, "msgs/s"}, Raw: Fig{capF, "msgs/s"}},
	{Label: "capacity 300 req/s: adaptive msgs/s ÷ ceiling", Onceq: Fig{capA, "of_ceiling"}, Target: AtLeast(0.8)},
	{Label: "capacity 300 req/s: % of calls throttled (adaptive vs fixed)", Onceq: Fig{capA, "throttled_%"}, Raw: Fig{capF, "throttled_%"}, NoRatio: true, Target: AtMost(5)},
	{Label: "capacity 300 req/s: p99 latency ms (adaptive vs fixed)", Onceq: Fig{capA, "p99_ms"}, Raw: Fig{capF, "p99_ms"}, NoRatio: true},
	{Label: "peak RSS MB, 1M vs 100k messages (MaxInFlight 1024)", Onceq: Fig{rss10, "peak_rss_MB"}, Raw: Fig{rss1, "peak_rss_MB"}, Target: Within(0.2)},
}
