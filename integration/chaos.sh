#!/usr/bin/env bash
# The body of `make chaos`: run the chaos driver (flags are passed on)
# against the servers in the environment, or against a private set it
# starts here and stops afterwards, by PID. Without a -source flag it runs
# twice, on SQS and then on Kafka, and fails if either run does.
# CHAOS_FLAGS="-store postgres" runs the workers on the PostgreSQL store
# (kills only: the fault proxy speaks DynamoDB).
# CHAOS_FLAGS=-pipeline runs the two-stage pipeline (order workers, onceq
# relay processes, shipping workers, all killed) and checks every order
# shipped exactly once on a "chaos: pipeline:" line.
# Each run prints a "chaos: history: ... verdict: linearizable" line (every
# key's store calls checked against the record's model, with the anomaly
# counts lost, duplicated, acked_uncommitted, fenced_commits) before its
# last line.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

bin="$(mktemp -d)"
started=""
cleanup() {
  rm -rf "$bin"
  if [ -n "$started" ]; then bash "$here/servers.sh" stop; fi
}
trap cleanup EXIT
need_pg=""
case " $* " in *" -store postgres "* | *" -store=postgres "*) need_pg=1 ;; esac
if [ -z "${ONCEQ_DYNAMODB_ENDPOINT:-}" ] || [ -z "${ONCEQ_SQS_ENDPOINT:-}" ] || { [ -n "$need_pg" ] && [ -z "${ONCEQ_POSTGRES_URL:-}" ]; }; then
  export ONCEQ_RUN_DIR="${ONCEQ_RUN_DIR:-$here/.run/chaos}"
  started=1
  bash "$here/servers.sh" start
  set -a
  # shellcheck disable=SC1091
  . "$ONCEQ_RUN_DIR/env"
  set +a
fi
cd "$root"
case " $* " in
  *" -source "* | *" -source="* | *" --source "* | *" --source="*)
    go run ./integration/chaos "$@" ;;
  *)
    go build -o "$bin/chaos" ./integration/chaos
    "$bin/chaos" -source sqs "$@"
    "$bin/chaos" -source kafka "$@" ;;
esac
