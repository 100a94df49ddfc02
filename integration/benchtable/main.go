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
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	md := flag.String("md", "", "also write the table, date, cores and command to this Markdown file")
	cmd := flag.String("cmd", "make bench", "the command that produced the figures, for the Markdown file")
	note := flag.String("note", "", "a line to add under the table in the Markdown file")
	profile := flag.String("profile", "", "a file of profile text (pprof -top) to print under the table in the Markdown file")
	scaling := flag.String("scaling", "", "the output of the memory pipeline run with -cpu 1,2, for the scaling row")
	mutex := flag.String("mutex", "", "the memory pipeline's mutex profile text (pprof -top), for the lock-delay row and under the table")
	byCPU := flag.Bool("by-cpu", false, "read a -cpu 1,2,… run and print each figure per core count (integration/bench-cores.sh)")
	flag.Parse()
	if *byCPU {
		if err := runByCPU(os.Stdout, flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(1)
		}
		return
	}
	extra := extras{scaling: *scaling, mutex: *mutex}
	if err := run(os.Stdout, flag.Args(), *md, *cmd, *note, *profile, extra); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

// extras are the inputs beside the benchmark output: files of the memory
// pipeline's scaling run and of its mutex profile (either may be "").
type extras struct{ scaling, mutex string }

// readAll reads the named files one after another (standard input when
// none are named), parsed by parse.
func readAll(inputs []string, parse func(io.Reader) (*Results, error)) (*Results, error) {
	var readers []io.Reader
	for _, name := range inputs {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		readers = append(readers, f)
	}
	if len(readers) == 0 {
		readers = append(readers, os.Stdin)
	}
	return parse(io.MultiReader(readers...))
}

func run(out io.Writer, inputs []string, md, cmd, note, profile string, extra extras) error {
	res, err := readAll(inputs, Parse)
	if err != nil {
		return err
	}
	if extra.scaling != "" {
		byCPU, err := readAll([]string{extra.scaling}, ParseByCPU)
		if err != nil {
			return err
		}
		maps.Copy(res.Values, byCPU.Values)
	}
	var mutexTop []byte
	if extra.mutex != "" {
		if mutexTop, err = os.ReadFile(extra.mutex); err != nil {
			return err
		}
		if share, ok := topShare(string(mutexTop)); ok {
			res.Values[mutexRow] = map[string][]float64{"top_%": {share}}
		}
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
	if len(mutexTop) > 0 {
		b.WriteString("\nWhere the memory pipeline's goroutines wait on locks, the top entries by delay, each charged to the function that held the lock (`go test -mutexprofile`, `go tool pprof -top -nodecount=5 -hide '^sync\\.'`):\n\n```\n" +
			strings.TrimRight(string(mutexTop), "\n") + "\n```\n")
	}
	b.WriteString(keptSections(md))
	return os.WriteFile(md, []byte(b.String()), 0o644)
}

// keptSections returns the sections ("## " headings onward) of the file
// at md, which the table does not write: figures measured apart from it,
// such as the constructions' that their comments point to. It returns ""
// when there is no file or no such section.
func keptSections(md string) string {
	old, err := os.ReadFile(md)
	if err != nil {
		return ""
	}
	text := string(old)
	if strings.HasPrefix(text, "## ") {
		return "\n" + text
	}
	if i := strings.Index(text, "\n## "); i >= 0 {
		return text[i:]
	}
	return ""
}

// mutexRow names the figure topShare reads from the mutex profile.
const mutexRow = "MutexProfile/memory-pipeline"

// topShare is the flat% of the first entry of pprof -top text: the share
// of all lock delay that the most contended lock's holders caused.
func topShare(top string) (float64, bool) {
	lines := strings.Split(top, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "flat%") || i+1 >= len(lines) {
			continue
		}
		f := strings.Fields(lines[i+1])
		if len(f) < 2 {
			return 0, false
		}
		v, err := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		return v, err == nil
	}
	return 0, false
}

// profileSection prints the memory pipeline's profile entries under the
// table: what bounds its throughput, from the same invocation.
func profileSection(top string) string {
	return "Where the memory pipeline (16 workers) spends its CPU, the top entries by own time (`go tool pprof -top -nodecount=5`, the producing of its messages left out):\n\n```\n" +
		strings.TrimRight(top, "\n") + "\n```\n"
}

const legend = `Rows:
- memory: the memory source and store, no-op handler (consumer BenchmarkMemoryPipeline); one op is one message, produced before the timer starts, so allocations and CPU count the consumer, the source's receive and settles and the store, not the producing. CPU µs per message is the process's CPU time (user and system) over the timed part, divided by the messages. "2 cores vs 1" runs the 16-worker pipeline with -cpu 1,2 in one invocation, and with it the two control rows (consumer BenchmarkPipelineControl), the machine's own ceiling for this shape of work with nothing of onceq in it: one goroutine hands each message over a channel to 16 workers, each does a few microseconds of arithmetic (about the pipeline's CPU per message) and hands it on to one settling goroutine; and the same work on every core with no hand-off at all. Where the controls scale far below 1.8 too, the cores were not free to take; "largest share of lock delay" is the top entry of its mutex profile, each delay charged to the function that held the lock, so a sharded lock's shards count together.
- cached duplicates: Guard.Process, from every core, of messages whose keys the COMPLETED cache holds (consumer BenchmarkCachedDuplicates); store calls are counted behind the cache.
- latency hiding: a handler sleeping 10 ms, 64 workers against 1 (consumer BenchmarkLatencyHiding).
- SQS: the fauxqs emulator, 10,000 messages, a raw ReceiveMessage(10) + DeleteMessageBatch loop against the consumer with the memory store, both 8-way (eight receivers; the source with Pollers(8)) (sources/sqssource BenchmarkRawVsConsumer). Client CPU µs per message is this process's CPU time over each side, per message; the emulator is another process, but shares the cores.
- Kafka: the in-process kfake broker, 1 KiB records, a raw kafka-go group FetchMessage + CommitMessages loop against the consumer with the memory store (integration/kafkacontrol BenchmarkGroupThroughput). Its CPU per message is the whole process's, the in-process broker's included, on each side.
- Kafka, franz-go: the same topic shape, a raw franz-go PollFetches + CommitUncommittedOffsets loop against the consumer over sources/franzsource with the memory store (sources/franzsource BenchmarkFranzThroughput); its CPU per message likewise the whole process's. The "source alone" rows drive each Source's Receive and Ack with no consumer: what the source costs apart from the consumer and the store.
- DynamoDB: DynamoDB Local, 32 calls in flight, SDK retries off on every side (dedup/dynamostore BenchmarkDynamoDB). Each store mode runs beside two hand-written versions of its job with the raw SDK client, the three sides taking turns in rounds of 200 ms within one run, each ratio the median of the rounds' ratios (sides run back to back): "minimal" is the smallest request that does the job (a conditional PutItem "attribute_not_exists(pk) OR expires_at < :now" returning the old item on failure; an UpdateItem conditioned on owner and status to complete it; their TransactWriteItems forms with the business write), "own" is the request onceq itself sends, written out by hand (a test keeps it identical), so onceq against it is the store's own cost on the client. Client CPU µs per message is the process's CPU time (user and system) over a side's rounds divided by its messages: DynamoDB Local is another process, so it is the client's alone. Calls per message are counted by SDK middleware, every HTTP attempt.
- PostgreSQL, Redis: the servers integration/servers.sh starts, 32 operations in flight, each store mode beside the minimal hand-written client doing the same job, the two sides taking turns in rounds of 200 ms within one run, each ratio the median of the rounds' ratios (internal/testsupport/sidebyside); every message a new key. PostgreSQL (dedup/pgstore BenchmarkPostgres, pgx, one pool of 16 connections): minimal is INSERT … ON CONFLICT DO UPDATE … WHERE expired RETURNING (which takes an expired record over in the same statement) plus a fenced UPDATE, the claim written as COMPLETED for "one statement", with the stock UPDATE in one transaction for the modes with a write; onceq claims a new key with INSERT … ON CONFLICT DO NOTHING and spends a second statement on a key that has a record. Calls are the statements a tracer on the pool counts, BEGIN and COMMIT included. Redis (dedup/redisstore BenchmarkRedis, go-redis): minimal is SET NX PXAT plus a script that completes while the owner holds the key, or SET NX of the completed value for "one round trip"; onceq claims a new key with SET NX of its whole record (one string; a GET more on a key that has a record) and completes with a fenced script. Calls are the commands a client hook counts. Client CPU as for DynamoDB. Each side's goroutines carry the profile label side=onceq or side=min (go tool pprof -tagfocus).
- Idempotency-Key middleware: one HTTP server and client in the benchmark's process, PostgreSQL beside it, 32 requests in flight, each a new key recording one payment row with its COMPLETED record (dedup/pgstore BenchmarkIdempotencyKey): the middleware (package idempotency/httpidem over a Runner, the row handed over with Tx.Write) beside a bare handler that reads the body, claims the key with the fingerprint's hash and completes with the row by hand, the two taking turns in rounds of 200 ms within one run, each ratio the median of the rounds' ratios (internal/testsupport/sidebyside). CPU is the whole process's: HTTP client and server, pgx, the middleware; each side's client and server work carry the profile label side=onceq or side=min (go tool pprof -tagfocus).
- Kafka batch mode: the in-process kfake broker, six partitions, over sources/franzsource (integration/batchbench). PostgreSQL (BenchmarkBatchPostgres, 20,000 records, one INSERT per record, three groups in one run): batch mode (batches of up to 500 records of one partition, each committed with its partition's offset row, pgstore's offset table) beside a raw franz-go loop applying each poll's inserts (up to 500 records) in one transaction, then committing the group's offsets, with no exactly once, and beside per-message mode (the consumer, 16 handlers, each record claimed then completed with its insert); each timing from the client's creation to the last record committed. Batch mode beside the raw consumer is its own run (BenchmarkBatchPostgresInterleaved): six rounds, each a pass of both sides, a new group and table per pass, the side that goes first alternating (internal/testsupport/sidebyside); msgs/s are the medians of the passes' rates, the ratio the median of the rounds' own ratios, beside it the lowest; CPU is the process's, the in-process broker included. Messages per store call are the records per offset-row call of batch mode (Acquire and Commit). DynamoDB (BenchmarkBatchDynamoDB, DynamoDB Local, 5,000 records, one Put per record, batches of up to 100): a batch of 100 needs 101 items with its offset row, over a transaction's 100, and commits in two parts; store writes per message are the offset-row calls (each commit one TransactWriteItems) per record.
- share group: the in-process kfake broker, six partitions of 1 KiB records, each side under a share group of its own reading every record once, the sides alternating within one run, each timed from its client's creation to the last record settled (integration/sharebench). PostgreSQL (BenchmarkSharePostgres, 5,000 records, a new records table per side and run): the consumer over sources/franzsource/sharesource and pgstore, 16 handlers doing nothing, against a hand-written franz-go share consumer that claims and completes each record of a poll, 16 at once, with the minimal statements of the PostgreSQL rows (INSERT … ON CONFLICT DO UPDATE … WHERE expired RETURNING, a fenced UPDATE) and accepts it after its commit, then polls again. Memory (BenchmarkShareMemory, 20,000 records): the consumer over the share-group source and the memory store against a raw share consumer that accepts every record with no dedup. CPU per message is the whole process's, the in-process broker's included, on each side; each side runs under a profile label (side=raw or onceq) for go tool pprof -tagfocus.
- capacity: the consumer with the DynamoDB store behind a fault proxy that throttles beyond 300 requests/s; "onceq" is the adaptive limiter (the default), "raw baseline" is WithoutAdaptiveConcurrency with per-call backoff only (dedup/dynamostore BenchmarkCapacity).
- outbox relay: entries committed beforehand in the memory store, drained by an outbox.Relay (passes of 100 to SQS, one at a time; four passes of 1000 at once to Kafka); SQS (sources/sqssource BenchmarkOutboxRelay) against a raw loop of SendMessageBatch calls of ten, ten at once, as the Sender makes them; Kafka (sources/franzsource BenchmarkOutboxRelayFranz) against a raw loop producing the same records (Produce each, then wait for every acknowledgement), 1 KiB, an order ID per record as its key. DynamoDB (dedup/dynamostore BenchmarkOutboxRelayDynamoDB): entries committed to the DynamoDB outbox, drained by a Relay with its default pass size and lease into a Sender that takes everything, against a raw loop on a plain table of the same items (query a page of 100, send it, delete it with BatchWriteItem calls of 25 side by side). The per-message cost rows run the whole path in one process on the memory store, the commit of each input with its outgoing message and the relay's drain, against a hand-written loop that commits each input and then sends what it produced in batches of ten; store calls count the commits and the relay's leases and marks.
- outbox on PostgreSQL to Kafka (integration/outboxbench BenchmarkOutboxVsWatermill, a module of its own): the same PostgreSQL and in-process kfake broker (six partitions), 8 committers, 10,000 messages of 1 KiB per phase, each a business transaction inserting an order's row and one outgoing message keyed by the order; each round runs each side in turn through three phases: commit only, the drain of that backlog only, then both at once on fresh messages (end to end, first commit to the last record the broker took); five rounds, medians, the slowest end-to-end round beside the median. onceq: ClaimComplete with the INSERT and the message (its COMPLETED record too), an outbox.Relay (passes of 100, woken by the outbox's notifications) with the franz-go Sender. Watermill: forwarder.NewPublisher over watermill-sql's publisher on the business transaction, forwarder.NewForwarder to Kafka through a franz-go publisher (Watermill's Kafka publisher needs Sarama). Raw: the two INSERTs in a transaction; a drainer taking 100 rows FOR UPDATE SKIP LOCKED, producing them, deleting them. Server CPU is the CPU time of each side's own PostgreSQL backends (/proc); round trips count each statement, BEGIN and COMMIT among them, and each pipeline as one.
- RSS: peak resident memory of a separate process per size (integration/rssbench), memory source and store, fixed MaxInFlight; "onceq" is 1M messages, "raw baseline" 100k.
`

const (
	mem   = "BenchmarkMemoryPipeline/workers=16"
	dup   = "BenchmarkCachedDuplicates"
	mem1  = "BenchmarkMemoryPipeline/workers=1"
	ctlH  = "BenchmarkPipelineControl/handoff"
	ctlP  = "BenchmarkPipelineControl/parallel"
	lat   = "BenchmarkLatencyHiding"
	sqs   = "BenchmarkRawVsConsumer"
	kafka = "BenchmarkGroupThroughput"
	franz = "BenchmarkFranzThroughput"
	ddb   = "BenchmarkDynamoDB/"
	pg    = "BenchmarkPostgres/"
	rds   = "BenchmarkRedis/"
	idem  = "BenchmarkIdempotencyKey"
	capA  = "BenchmarkCapacity/Adaptive"
	capF  = "BenchmarkCapacity/Fixed"
	bpg   = "BenchmarkBatchPostgres"
	bddb  = "BenchmarkBatchDynamoDB"
	bpgi  = "BenchmarkBatchPostgresInterleaved"
	rss1  = "BenchmarkRSS/messages=100000"
	rss10 = "BenchmarkRSS/messages=1000000"
)

var rowsBeforeDynamo = []Row{
	{Label: "memory, 16 workers: msgs/s", Onceq: Fig{mem, "msgs/s"}, Target: AtLeast(500000)},
	{Label: "memory, 16 workers: ns/msg", Onceq: Fig{mem, "ns/op"}},
	{Label: "memory, 16 workers: allocs/msg", Onceq: Fig{mem, "allocs/op"}, Target: AtMost(5)},
	{Label: "memory, 16 workers: CPU µs/msg", Onceq: Fig{mem, "cpu-us/msg"}},
	{Label: "memory, 16 workers: msgs/s, 2 cores vs 1 (-cpu 1,2, same run)", Onceq: Fig{mem + "@2", "msgs/s"}, Raw: Fig{mem + "@1", "msgs/s"}, Target: AtLeast(1.8)},
	{Label: "control, the memory pipeline's shape without onceq (a channel hand-off to 16 workers): msgs/s, 2 cores vs 1 (same run)", Onceq: Fig{ctlH + "@2", "msgs/s"}, Raw: Fig{ctlH + "@1", "msgs/s"}},
	{Label: "control, the same work on every core, no hand-off: msgs/s, 2 cores vs 1 (same run)", Onceq: Fig{ctlP + "@2", "msgs/s"}, Raw: Fig{ctlP + "@1", "msgs/s"}},
	{Label: "memory, 16 workers: largest share of lock delay, % (one function)", Onceq: Fig{mutexRow, "top_%"}, Target: AtMost(20)},
	{Label: "memory, 1 worker: msgs/s", Onceq: Fig{mem1, "msgs/s"}},
	{Label: "memory, 1 worker: allocs/msg", Onceq: Fig{mem1, "allocs/op"}, Target: AtMost(5)},
	{Label: "memory, 1 worker: CPU µs/msg", Onceq: Fig{mem1, "cpu-us/msg"}},
	{Label: "cached duplicates: msgs/s", Onceq: Fig{dup, "msgs/s"}, Target: AtLeast(1000000)},
	{Label: "cached duplicates: allocs/msg", Onceq: Fig{dup, "allocs/op"}, Target: Equal(0)},
	{Label: "cached duplicates: store calls/msg", Onceq: Fig{dup, "store-calls/msg"}, Target: Equal(0)},
	{Label: "cached duplicates: CPU µs/msg", Onceq: Fig{dup, "cpu-us/msg"}},
	{Label: "latency hiding, 10 ms handler: msgs/s (64 workers vs 1)", Onceq: Fig{lat, "w64_msgs/s"}, Raw: Fig{lat, "w1_msgs/s"}, Ratio: Fig{lat, "ratio"}, Target: AtLeast(50)},
	{Label: "SQS (fauxqs), 8-way: msgs/s", Onceq: Fig{sqs, "onceq_msgs/s"}, Raw: Fig{sqs, "raw_msgs/s"}, Ratio: Fig{sqs, "ratio"}, Target: AtLeast(0.9)},
	{Label: "SQS (fauxqs), 8-way: client CPU µs/msg", Onceq: Fig{sqs, "onceq_cpu-us/msg"}, Raw: Fig{sqs, "raw_cpu-us/msg"}},
	{Label: "Kafka (kfake), 1 KiB: msgs/s", Onceq: Fig{kafka, "onceq_msgs/s"}, Raw: Fig{kafka, "raw_msgs/s"}, Ratio: Fig{kafka, "ratio"}, Target: AtLeast(0.8)},
	{Label: "Kafka (kfake), 1 KiB: CPU µs/msg, broker included", Onceq: Fig{kafka, "onceq_cpu-us/msg"}, Raw: Fig{kafka, "raw_cpu-us/msg"}},
	{Label: "Kafka (kfake), 1 KiB: the source alone (Receive + Ack), msgs/s", Onceq: Fig{kafka, "source_msgs/s"}, Raw: Fig{kafka, "raw_msgs/s"}},
	{Label: "Kafka (kfake) over franz-go, 1 KiB: msgs/s", Onceq: Fig{franz, "onceq_msgs/s"}, Raw: Fig{franz, "raw_msgs/s"}, Ratio: Fig{franz, "ratio"}, Target: AtLeast(0.8)},
	{Label: "Kafka (kfake) over franz-go, 1 KiB: CPU µs/msg, broker included", Onceq: Fig{franz, "onceq_cpu-us/msg"}, Raw: Fig{franz, "raw_cpu-us/msg"}},
	{Label: "Kafka (kfake) over franz-go, 1 KiB: the source alone (Receive + Ack), msgs/s", Onceq: Fig{franz, "source_msgs/s"}, Raw: Fig{franz, "raw_msgs/s"}},
}

// rows are the table's: the DynamoDB modes each beside the smallest
// hand-written request that does the same job ("minimal") and beside
// onceq's own request written out with the raw SDK ("own"), the sides
// measured in interleaved rounds of one run.
var rows = slices.Concat(
	rowsBeforeDynamo,
	dynamoRows("ClaimThenComplete", "claim+complete", 2),
	dynamoRows("ClaimComplete", "one round trip", 1),
	dynamoRows("ClaimThenCompleteWith1Write", "transaction mode (claim, complete + 1 write)", 2),
	dynamoRows("ClaimCompleteWith1Write", "one round trip + 1 write", 1),
	rowsAfterDynamo,
	sqlRows("PostgreSQL", pg+"ClaimThenComplete", "claim+complete", 2),
	sqlRows("PostgreSQL", pg+"ClaimComplete", "one statement", 1),
	sqlRows("PostgreSQL", pg+"ClaimThenCompleteWith1Write", "claim, complete + 1 write", 5),
	sqlRows("PostgreSQL", pg+"ClaimCompleteWith1Write", "one transaction + 1 write", 4),
	sqlRows("Redis", rds+"ClaimThenComplete", "claim+complete", 2),
	sqlRows("Redis", rds+"ClaimComplete", "one round trip", 1),
	idempotencyKeyRows,
	outboxRows,
	outboxPostgresRows,
	batchRows,
	shareRows,
)

// idempotencyKeyRows are the Idempotency-Key middleware's, beside a bare
// handler that makes the same store calls by hand.
var idempotencyKeyRows = []Row{
	{Label: "Idempotency-Key middleware, PostgreSQL, payment + 1 write: client CPU µs/request, middleware vs bare handler with the same store calls",
		Onceq: Fig{idem, "onceq_cpu-us/op"}, Raw: Fig{idem, "min_cpu-us/op"}, Ratio: Fig{idem, "cpu_vs_min"}, Target: AtMost(1.1)},
	{Label: "Idempotency-Key middleware, PostgreSQL, payment + 1 write: requests/s, middleware vs bare handler",
		Onceq: Fig{idem, "onceq_msgs/s"}, Raw: Fig{idem, "min_msgs/s"}, Ratio: Fig{idem, "vs_min"}},
}

// The outbox relay's benchmarks.
const (
	relaySQS   = "BenchmarkOutboxRelay"
	relayFranz = "BenchmarkOutboxRelayFranz"
	relayDDB   = "BenchmarkOutboxRelayDynamoDB"
)

var outboxRows = []Row{
	{Label: "outbox relay to SQS (fauxqs): msgs/s, relay vs raw SendMessageBatch loop (10-way)", Onceq: Fig{relaySQS, "relay_msgs/s"}, Raw: Fig{relaySQS, "raw_msgs/s"}, Ratio: Fig{relaySQS, "ratio"}, Target: AtLeast(0.8)},
	{Label: "outbox to SQS, per outgoing message: client CPU µs, commit + relay vs commit, then send (by hand)", Onceq: Fig{relaySQS, "outbox_cpu-us/msg"}, Raw: Fig{relaySQS, "hand_cpu-us/msg"}},
	{Label: "outbox to SQS, per outgoing message: store calls, commit + relay vs commit, then send (by hand)", Onceq: Fig{relaySQS, "outbox_store-calls/msg"}, Raw: Fig{relaySQS, "hand_store-calls/msg"}, NoRatio: true},
	{Label: "outbox relay to Kafka (kfake) over franz-go, 1 KiB: msgs/s, relay vs raw produce loop", Onceq: Fig{relayFranz, "relay_msgs/s"}, Raw: Fig{relayFranz, "raw_msgs/s"}, Ratio: Fig{relayFranz, "ratio"}, Target: AtLeast(0.9)},
	{Label: "outbox relay to Kafka (kfake) over franz-go, 1 KiB: CPU µs/msg, broker included", Onceq: Fig{relayFranz, "relay_cpu-us/msg"}, Raw: Fig{relayFranz, "raw_cpu-us/msg"}},
	{Label: "outbox relay on DynamoDB Local, 1 KiB, default pass and lease: msgs/s, relay vs raw query, send, delete loop", Onceq: Fig{relayDDB, "relay_msgs/s"}, Raw: Fig{relayDDB, "raw_msgs/s"}, Ratio: Fig{relayDDB, "ratio"}, Target: AtLeast(0.8)},
	{Label: "outbox relay on DynamoDB Local, 1 KiB: client CPU µs/msg", Onceq: Fig{relayDDB, "relay_cpu-us/msg"}, Raw: Fig{relayDDB, "raw_cpu-us/msg"}},
}

// The share-group benchmarks (integration/sharebench).
const (
	sharePG  = "BenchmarkSharePostgres"
	shareMem = "BenchmarkShareMemory"
)

// shareRows are the share-group source's: on PostgreSQL beside a
// hand-written share consumer making the same statements, and over the
// memory store beside a raw share consumer with no dedup.
var shareRows = []Row{
	{Label: "share group on PostgreSQL, 1 KiB: msgs/s, onceq vs hand-written (same claim and complete statements, accept after commit)", Onceq: Fig{sharePG, "onceq_msgs/s"}, Raw: Fig{sharePG, "raw_msgs/s"}, Ratio: Fig{sharePG, "ratio"}, Target: AtLeast(0.9)},
	{Label: "share group on PostgreSQL, 1 KiB: CPU µs/msg, broker included, onceq vs hand-written", Onceq: Fig{sharePG, "onceq_cpu-us/msg"}, Raw: Fig{sharePG, "raw_cpu-us/msg"}},
	{Label: "share group, memory store, 1 KiB: msgs/s, onceq vs raw share consumer accepting every record (the price of exactly once)", Onceq: Fig{shareMem, "onceq_msgs/s"}, Raw: Fig{shareMem, "raw_msgs/s"}, Ratio: Fig{shareMem, "ratio"}},
	{Label: "share group, memory store, 1 KiB: CPU µs/msg, broker included, onceq vs raw share consumer", Onceq: Fig{shareMem, "onceq_cpu-us/msg"}, Raw: Fig{shareMem, "raw_cpu-us/msg"}},
}

// outboxPostgresRows are the PostgreSQL outbox's, relayed to Kafka,
// beside Watermill's forwarder and a raw SKIP LOCKED loop, in alternating
// rounds of one run.
const obpg = "BenchmarkOutboxVsWatermill"

var outboxPostgresRows = []Row{
	{Label: "outbox, PostgreSQL to Kafka (kfake), end to end: msgs/s, onceq vs Watermill's forwarder", Onceq: Fig{obpg, "onceq_msgs/s"}, Raw: Fig{obpg, "watermill_msgs/s"}, Ratio: Fig{obpg, "vs_watermill"}, Target: AtLeast(1.0)},
	{Label: "outbox, PostgreSQL to Kafka, end to end: msgs/s, onceq vs a raw SKIP LOCKED loop", Onceq: Fig{obpg, "onceq_msgs/s"}, Raw: Fig{obpg, "raw_msgs/s"}, Ratio: Fig{obpg, "vs_raw"}},
	{Label: "outbox, PostgreSQL to Kafka, end to end: slowest round / median round, onceq vs Watermill", Onceq: Fig{obpg, "onceq_slowest_vs_median"}, Raw: Fig{obpg, "watermill_slowest_vs_median"}, NoRatio: true, Target: AtLeast(0.8)},
	{Label: "outbox, PostgreSQL to Kafka, commit only: msgs/s, onceq vs Watermill", Onceq: Fig{obpg, "onceq_commit_msgs/s"}, Raw: Fig{obpg, "watermill_commit_msgs/s"}},
	{Label: "outbox, PostgreSQL to Kafka, drain only: msgs/s, onceq relay vs Watermill forwarder", Onceq: Fig{obpg, "onceq_drain_msgs/s"}, Raw: Fig{obpg, "watermill_drain_msgs/s"}},
	{Label: "outbox, PostgreSQL to Kafka, end to end: client CPU µs/msg, onceq vs Watermill", Onceq: Fig{obpg, "onceq_client_cpu-us/msg"}, Raw: Fig{obpg, "watermill_client_cpu-us/msg"}},
	{Label: "outbox, PostgreSQL to Kafka, end to end: server CPU µs/msg (the side's backends), onceq vs Watermill", Onceq: Fig{obpg, "onceq_server_cpu-us/msg"}, Raw: Fig{obpg, "watermill_server_cpu-us/msg"}},
	{Label: "outbox, PostgreSQL to Kafka, end to end: round trips/msg, onceq vs Watermill", Onceq: Fig{obpg, "onceq_round-trips/msg"}, Raw: Fig{obpg, "watermill_round-trips/msg"}, NoRatio: true},
}

// batchRows are Kafka batch mode's: on PostgreSQL beside the raw consumer
// in passes taking turns, and beside per-message mode; on DynamoDB its
// store writes per message.
var batchRows = []Row{
	{Label: "Kafka batch mode on PostgreSQL: msgs/s, vs the raw consumer applying the same inserts (alternating passes)", Onceq: Fig{bpgi, "onceq_msgs/s"}, Raw: Fig{bpgi, "min_msgs/s"}, Ratio: Fig{bpgi, "vs_min"}, Target: AtLeast(0.95)},
	{Label: "Kafka batch mode on PostgreSQL: slowest pass's ratio to the raw consumer's", Onceq: Fig{bpgi, "slowest_vs_min"}},
	{Label: "Kafka batch mode on PostgreSQL: client CPU µs/msg, broker included, vs the raw consumer", Onceq: Fig{bpgi, "onceq_cpu-us/op"}, Raw: Fig{bpgi, "min_cpu-us/op"}, Ratio: Fig{bpgi, "cpu_vs_min"}},
	{Label: "Kafka batch mode on PostgreSQL: msgs/s, vs per-message mode", Onceq: Fig{bpg, "batch_msgs/s"}, Raw: Fig{bpg, "permsg_msgs/s"}, Ratio: Fig{bpg, "vs_permsg"}, Target: AtLeast(10)},
	{Label: "Kafka batch mode on PostgreSQL: messages per store call, batches of 500", Onceq: Fig{bpg, "msgs/store_call"}},
	{Label: "Kafka batch mode on DynamoDB: store writes per message, batches of 100", Onceq: Fig{bddb, "store_writes/msg"}, Target: AtMost(0.05)},
	{Label: "Kafka batch mode on DynamoDB: msgs/s", Onceq: Fig{bddb, "batch_msgs/s"}},
}

// sqlRows are the rows of a PostgreSQL or Redis store mode beside the
// minimal hand-written client: its benchmark, a label, and the calls
// (statements, BEGIN and COMMIT included, or commands) per new message.
func sqlRows(store, bench, label string, calls float64) []Row {
	return []Row{
		{Label: store + " " + label + ": msgs/s, onceq vs minimal hand-written", Onceq: Fig{bench, "onceq_msgs/s"}, Raw: Fig{bench, "min_msgs/s"}, Ratio: Fig{bench, "vs_min"}, Target: AtLeast(0.9)},
		{Label: store + " " + label + ": client CPU µs/msg, onceq vs minimal hand-written", Onceq: Fig{bench, "onceq_cpu-us/op"}, Raw: Fig{bench, "min_cpu-us/op"}, Ratio: Fig{bench, "cpu_vs_min"}},
		{Label: store + " " + label + ": calls per unique message (onceq vs minimal)", Onceq: Fig{bench, "onceq_calls/msg"}, Raw: Fig{bench, "min_calls/msg"}, NoRatio: true, Target: Equal(calls)},
	}
}

// dynamoRows are the rows of one DynamoDB store mode: its benchmark,
// a label, and its DynamoDB calls per unique message.
func dynamoRows(mode, label string, calls float64) []Row {
	b := ddb + mode
	return []Row{
		{Label: "DynamoDB " + label + ": msgs/s, onceq vs minimal hand-written", Onceq: Fig{b, "onceq_msgs/s"}, Raw: Fig{b, "min_msgs/s"}, Ratio: Fig{b, "vs_min"}, Target: AtLeast(0.9)},
		{Label: "DynamoDB " + label + ": msgs/s, onceq vs its own request by hand", Onceq: Fig{b, "onceq_msgs/s"}, Raw: Fig{b, "own_msgs/s"}, Ratio: Fig{b, "vs_own"}, Target: AtLeast(0.95)},
		{Label: "DynamoDB " + label + ": client CPU µs/msg, onceq vs its own request by hand", Onceq: Fig{b, "onceq_cpu-us/op"}, Raw: Fig{b, "own_cpu-us/op"}, Ratio: Fig{b, "cpu_vs_own"}, Target: AtMost(1.1)},
		{Label: "DynamoDB " + label + ": client CPU µs/msg, onceq vs minimal hand-written", Onceq: Fig{b, "onceq_cpu-us/op"}, Raw: Fig{b, "min_cpu-us/op"}, Ratio: Fig{b, "cpu_vs_min"}},
		{Label: "DynamoDB " + label + ": calls per unique message (onceq vs minimal)", Onceq: Fig{b, "calls/msg"}, Raw: Fig{b, "min_calls/msg"}, NoRatio: true, Target: Equal(calls)},
	}
}

var rowsAfterDynamo = []Row{
	{Label: "DynamoDB calls per duplicate (store, no cache)", Onceq: Fig{ddb + "Duplicate", "calls/msg"}, Target: Equal(1)},
	{Label: "capacity 300 req/s: msgs/s (adaptive vs fixed)", Onceq: Fig{capA, "msgs/s"}, Raw: Fig{capF, "msgs/s"}},
	{Label: "capacity 300 req/s: adaptive msgs/s ÷ ceiling", Onceq: Fig{capA, "of_ceiling"}, Target: AtLeast(0.8)},
	{Label: "capacity 300 req/s: % of calls throttled (adaptive vs fixed)", Onceq: Fig{capA, "throttled_%"}, Raw: Fig{capF, "throttled_%"}, NoRatio: true, Target: AtMost(5)},
	{Label: "capacity 300 req/s: p99 latency ms (adaptive vs fixed)", Onceq: Fig{capA, "p99_ms"}, Raw: Fig{capF, "p99_ms"}, NoRatio: true},
	{Label: "peak RSS MB, 1M vs 100k messages (MaxInFlight 1024)", Onceq: Fig{rss10, "peak_rss_MB"}, Raw: Fig{rss1, "peak_rss_MB"}, Target: Within(0.2)},
}
