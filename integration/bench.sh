#!/usr/bin/env bash
# The body of `make bench`: start the servers the benchmarks need (a
# private set, stopped by PID on exit), run every benchmark of the table
# several times, and print one table of medians, onceq beside the raw
# client, which also goes to BENCHMARKS.md with the date, cores and command.
#
# Counts (environment): BENCH_COUNT (5) runs of each Go benchmark,
# BENCH_CAPACITY_COUNT (3) of the capacity comparison (about 45 s each),
# BENCH_RSS_COUNT (3) of each RSS size. Total about 7 minutes on 2 cores.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
count="${BENCH_COUNT:-5}"
capcount="${BENCH_CAPACITY_COUNT:-3}"
rsscount="${BENCH_RSS_COUNT:-3}"

export ONCEQ_RUN_DIR="${ONCEQ_BENCH_RUN_DIR:-$here/.run-bench}"
bash "$here/servers.sh" start || exit 1
trap 'bash "$here/servers.sh" stop' EXIT
set -a
# shellcheck disable=SC1091
. "$ONCEQ_RUN_DIR/env"
set +a
# Fail, never skip, when a server is missing: a table with holes is no table.
export CI=true

cd "$root"
out="$ONCEQ_RUN_DIR/bench.out"
: >"$out"
failed=0
bench() { # package, then go test flags
  local pkg="$1"; shift
  echo "== $pkg $*" >&2
  go test -run '^$' "$@" "$pkg" 2>&1 | tee -a "$out" || failed=1
}
loadavg() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown; }
load_start=$(loadavg)
start=$(date +%s)
bench ./consumer/ -bench '^(BenchmarkMemoryPipeline|BenchmarkCachedDuplicates|BenchmarkLatencyHiding)$' -benchmem -count "$count"
# The same pipeline on 1 core and on 2, in one run, for the scaling row
# (kept apart from the figures above, which run on every core), with the
# control that shows how far the machine lets this shape of work scale.
scaling="$ONCEQ_RUN_DIR/memory-pipeline-scaling.out"
echo "== ./consumer/ memory pipeline and its control, -cpu 1,2" >&2
go test -run '^$' -bench '^BenchmarkMemoryPipeline/workers=16$|^BenchmarkPipelineControl$' -cpu 1,2 -count "$count" ./consumer/ 2>&1 | tee "$scaling" || failed=1
# Once more under the CPU profiler, for the top entries under the table
# (not into the table: a profiled run is slower).
profile_top="$ONCEQ_RUN_DIR/memory-pipeline.top"
mutex_top="$ONCEQ_RUN_DIR/memory-pipeline-mutex.top"
echo "== ./consumer/ memory pipeline, profiled" >&2
if go test -run '^$' -bench '^BenchmarkMemoryPipeline/workers=16$' -benchtime 300000x \
    -cpuprofile "$ONCEQ_RUN_DIR/memory-pipeline.prof" -mutexprofile "$ONCEQ_RUN_DIR/memory-pipeline-mutex.prof" \
    -o "$ONCEQ_RUN_DIR/consumer.test" ./consumer/ >/dev/null &&
  go tool pprof -top -nodecount=5 -relative_percentages -ignore 'consumer_test\.produce' \
    "$ONCEQ_RUN_DIR/consumer.test" "$ONCEQ_RUN_DIR/memory-pipeline.prof" 2>/dev/null |
  sed -n '/^ *flat/,$p' >"$profile_top" &&
  go tool pprof -top -nodecount=5 -hide '^sync\.' "$ONCEQ_RUN_DIR/consumer.test" "$ONCEQ_RUN_DIR/memory-pipeline-mutex.prof" 2>/dev/null |
  sed -n '/^ *flat/,$p' >"$mutex_top"; then
  :
else
  failed=1
  : >"$profile_top"
  : >"$mutex_top"
fi
bench ./sources/sqssource/ -bench '^BenchmarkRawVsConsumer$' -benchtime 3x -count "$count"
bench ./integration/kafkacontrol/ -bench '^BenchmarkGroupThroughput$' -benchtime 1x -count "$count"
bench ./sources/franzsource/ -bench '^BenchmarkFranzThroughput$' -benchtime 1x -count "$count"
bench ./sources/sqssource/ -bench '^BenchmarkOutboxRelay$' -benchtime 1x -count "$count"
bench ./sources/franzsource/ -bench '^BenchmarkOutboxRelayFranz$' -benchtime 1x -count "$count"
bench ./dedup/dynamostore/ -bench '^BenchmarkOutboxRelayDynamoDB$' -benchtime 1x -count "$count"
bench ./dedup/dynamostore/ -bench '^BenchmarkDynamoDB$' -count "$count"
bench ./dedup/dynamostore/ -bench '^BenchmarkCapacity$' -benchtime 1x -count "$capcount" -timeout 30m
bench ./dedup/pgstore/ -bench '^BenchmarkPostgres$' -count "$count"
bench ./dedup/redisstore/ -bench '^BenchmarkRedis$' -count "$count"
bench ./dedup/pgstore/ -bench '^BenchmarkIdempotencyKey$' -count "$count"
bench ./integration/outboxbench/ -bench '^BenchmarkOutboxVsWatermill$' -benchtime 1x -count 1 -timeout 30m
bench ./integration/batchbench/ -bench '^BenchmarkBatch(Postgres|DynamoDB)$' -benchtime 1x -count "$count"
# Batch mode and the raw consumer in alternating passes, six rounds in each
# run (about a minute a run on 2 cores).
bench ./integration/batchbench/ -bench '^BenchmarkBatchPostgresInterleaved$' -benchtime 1x -count "$count"
bench ./integration/sharebench/ -bench '^BenchmarkShare(Postgres|Memory)$' -benchtime 1x -count "$count"
# The share group's onceq side over the memory store, profiled: what bounds
# the price of exactly once on a share group (printed, not in the table).
echo "== ./integration/sharebench/ share group over the memory store, profiled" >&2
if go test -run '^$' -bench '^BenchmarkShareMemory$' -benchtime 2x -cpuprofile "$ONCEQ_RUN_DIR/share-memory.prof" \
    -o "$ONCEQ_RUN_DIR/sharebench.test" ./integration/sharebench/ >/dev/null; then
  go tool pprof -top -nodecount=8 -tagfocus side=onceq "$ONCEQ_RUN_DIR/sharebench.test" "$ONCEQ_RUN_DIR/share-memory.prof" 2>/dev/null |
    sed -n '/^ *flat/,$p' >&2
else
  failed=1
fi

rss="$ONCEQ_RUN_DIR/rssbench"
if go build -o "$rss" ./integration/rssbench; then
  for n in 100000 1000000; do
    for _ in $(seq "$rsscount"); do
      echo "== rssbench -messages $n" >&2
      "$rss" -messages "$n" -max-in-flight 1024 | tee -a "$out" || failed=1
    done
  done
else
  failed=1
fi
took=$(( $(date +%s) - start ))
load_end=$(loadavg)

echo
go run ./integration/benchtable -md BENCHMARKS.md -cmd "make bench" -profile "$profile_top" -scaling "$scaling" -mutex "$mutex_top" \
  -note "Runs: $count of each Go benchmark, $capcount of the capacity comparison, $rsscount of each RSS size; $took s in all. Load average (1, 5, 15 min) $load_start at the start, $load_end at the end: figures from a loaded machine are low, and ratios between runs minutes apart (the DynamoDB rows) noisy." "$out" || failed=1
echo "(written to BENCHMARKS.md; raw output in $out)"
exit "$failed"
