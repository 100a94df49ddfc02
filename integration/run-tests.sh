#!/usr/bin/env bash
# The body of `make test`: lint, start the real servers, run every test
# with the race detector against them, stop exactly what was started.
# Each stage says when it begins and how long it took; the tests report
# each package as it ends, each group of packages once done, and what is
# still running whenever a minute passes with nothing to say.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
began=$SECONDS

# stage [-quiet] NAME COMMAND...: runs COMMAND, saying every minute that
# it is still running (unless -quiet: COMMAND says so itself), and then
# how long it took.
stage() {
  local beat_on=1 t0=$SECONDS rc=0 beat=""
  if [ "$1" = -quiet ]; then beat_on=0; shift; fi
  local name="$1"
  shift
  echo "==> $name"
  if [ "$beat_on" -eq 1 ]; then
    ( trap 'kill "$s" 2>/dev/null; exit 0' TERM
      while :; do sleep 60 & s=$!; wait "$s"; echo ".. $name: still running after $(( SECONDS - t0 )) s"; done ) &
    beat=$!
  fi
  "$@" || rc=$?
  if [ -n "$beat" ]; then
    kill "$beat" 2>/dev/null || true
    wait "$beat" 2>/dev/null || true
  fi
  if [ "$rc" -eq 0 ]; then
    echo "<== $name: $(( SECONDS - t0 )) s"
  else
    echo "<== $name: FAILED after $(( SECONDS - t0 )) s (exit $rc)"
  fi
  return "$rc"
}

cd "$root"
stage "lint (hygiene, gofmt, go vet, staticcheck)" "${MAKE:-make}" --no-print-directory lint

# docker-compose.yml, for users with Docker (there is none here): loaded as
# Compose loads it (schema, interpolation) and checked for what it promises.
# A module of its own, so the library's go.mod never requires compose-go.
stage "docker-compose.yml check" bash -c 'cd "$1/composecheck" && go test -count=1 ./...' _ "$here"

export ONCEQ_RUN_DIR="${ONCEQ_RUN_DIR:-$here/.run}"
stage "servers (start)" bash "$here/servers.sh" start
trap 'stage "servers (stop)" bash "$here/servers.sh" stop' EXIT
set -a
# shellcheck disable=SC1091
. "$ONCEQ_RUN_DIR/env"
set +a

# Every package, in one go test run (its packages in parallel), reported by
# group: a group's line comes once its last package is done. go test
# starts packages in the order they are named, so the few that run for
# minutes (mostly waiting on the servers and on worker processes they
# kill) are named first and overlap the many short ones, instead of
# starting last and running alone. Three packages run at once, not one
# per core: most of them spend most of their time waiting on the servers,
# on leases and on worker processes (a 2-core machine sits 70-90% idle
# with two at once once the first two are done).
list="$ONCEQ_RUN_DIR/packages"
long="integration/chaos integration/readme integration/faultmatrix integration/kafkaboth dedup/dynamostore examples/order-worker sources/sqssource cmd/onceq sources/franzsource sources/kafkasource consumer sources/franzsource/sharesource"
{
  for p in $long; do echo "github.com/onceq/onceq/$p"; done
  go list github.com/onceq/onceq/... | grep -vxF -f <(for p in $long; do echo "github.com/onceq/onceq/$p"; done)
} >"$list"
go build -o "$ONCEQ_RUN_DIR/testreport" ./integration/testreport
# What tests save as artifacts (the console's screenshots, one per view)
# is kept under $ONCEQ_RUN_DIR/test-output/_artifacts.
rm -rf "$ONCEQ_RUN_DIR/test-output"
mkdir -p "$ONCEQ_RUN_DIR/test-output"
tests() {
  # shellcheck disable=SC2046
  go test -json -race -count=1 -p 3 -timeout 14m -artifacts -outputdir "$ONCEQ_RUN_DIR/test-output" $(cat "$list") 2>&1 |
    "$ONCEQ_RUN_DIR/testreport" -packages "$list" \
      -group "stores=/dedup/dynamostore|/dedup/pgstore|/dedup/redisstore" \
      -group "sources=/sources/" \
      -group "lambda=/lambda/" \
      -group "cli and examples=/cmd/|/examples/|/monitoring" \
      -group "integration=/integration/" \
      -group "core=github.com/onceq/onceq"
}
stage -quiet "tests (go test -race, every package)" tests
echo "make test: all passed in $(( SECONDS - began )) s; test artifacts (the console's screenshots) in $ONCEQ_RUN_DIR/test-output/_artifacts"
