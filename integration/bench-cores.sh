#!/usr/bin/env bash
# bench-cores.sh: how the core scales with cores. Runs the memory pipeline
# (with its control: the same shape of work without onceq, the machine's
# own ceiling), the cached-duplicate path and both Kafka sources (each
# beside its raw client, in-process kfake broker; no other server) at several GOMAXPROCS
# settings in one invocation, and prints one table: each figure per core
# count, and each throughput over its 1-core figure.
#
#   bash integration/bench-cores.sh               build and run here
#   bash integration/bench-cores.sh build DIR     build the test binaries into DIR
#   bash integration/bench-cores.sh run DIR       run binaries built earlier
#                                                 (copy DIR to a bigger machine)
#
# CPUS (default 1,2,4,8,16, capped at this machine's cores) and COUNT
# (default 3) set the runs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
mode=${1:-all}
dir=${2:-$root/integration/.run-bench/cores}
mkdir -p "$dir"

build() {
  cd "$root"
  go test -c -o "$dir/consumer.test" ./consumer/
  go test -c -o "$dir/kafkasource.test" ./integration/kafkacontrol/
  go test -c -o "$dir/franzsource.test" ./sources/franzsource/
  go build -o "$dir/benchtable" ./integration/benchtable
}

run() {
  local ncpu cpus count out
  ncpu=$(nproc)
  cpus=$(echo "${CPUS:-1,2,4,8,16}" | tr ',' '\n' | awk -v n="$ncpu" '$1 <= n' | paste -sd, -)
  count=${COUNT:-3}
  out="$dir/cores.out"
  : >"$out"
  cd "$dir"
  ./consumer.test -test.run '^$' -test.bench '^BenchmarkMemoryPipeline$/^workers=16$|^BenchmarkPipelineControl$' \
    -test.cpu "$cpus" -test.count "$count" | tee -a "$out"
  ./consumer.test -test.run '^$' -test.bench '^BenchmarkCachedDuplicates$' \
    -test.cpu "$cpus" -test.count "$count" | tee -a "$out"
  ./kafkasource.test -test.run '^$' -test.bench '^BenchmarkGroupThroughput$' -test.benchtime 1x \
    -test.cpu "$cpus" -test.count "$count" | tee -a "$out"
  ./franzsource.test -test.run '^$' -test.bench '^BenchmarkFranzThroughput$' -test.benchtime 1x \
    -test.cpu "$cpus" -test.count "$count" | tee -a "$out"
  echo
  echo "$ncpu cores; -cpu $cpus, $count runs each, medians:"
  ./benchtable -by-cpu "$out"
}

case "$mode" in
  build) build ;;
  run) run ;;
  all) build && run ;;
  *) echo "usage: $0 [build DIR | run DIR]" >&2; exit 2 ;;
esac
