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
# CHAOS_FLAGS=-redrive runs the pipeline, parks orders in the dead-letter
# queue or topic and has some outbox entries refused (DEAD), and redrives
# every dead letter and DEAD entry with onceq redrive, twice at once and
# once more, while workers, relays and shipping workers are killed; on SQS
# and then on Kafka unless -source names one. Its "chaos: redrive:" line
# counts what the runs moved and reset.
# CHAOS_FLAGS=-batch runs Kafka batch mode, on kafka-go and then on
# franz-go unless -source names one; CHAOS_FLAGS=-txn runs Kafka
# transactions (franztxn processors, on franz-go; no store, no servers).
# Each run prints a "chaos: history: ... verdict: linearizable" line before
# its last line: every key's store calls checked against the record's
# model (anomaly counts lost, duplicated, acked_uncommitted,
# fenced_commits); under -batch every partition's offset-row calls
# ("history: offsets:", lost and doubled offsets, gaps, overlaps,
# token_down, fenced_commits); under -txn what a read_committed reader saw
# ("history: txn:", lost, doubled, torn, phantom, out_of_order).
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
txn=""
case " $* " in *" -txn "*) txn=1 ;; esac
if [ -z "$txn" ] && { [ -z "${ONCEQ_DYNAMODB_ENDPOINT:-}" ] || [ -z "${ONCEQ_SQS_ENDPOINT:-}" ] || { [ -n "$need_pg" ] && [ -z "${ONCEQ_POSTGRES_URL:-}" ]; }; }; then
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
    case " $* " in
      *" -txn "*)
        "$bin/chaos" -source franz "$@" ;;
      *" -batch "*)
        "$bin/chaos" -source kafka "$@"
        "$bin/chaos" -source franz "$@" ;;
      *)
        "$bin/chaos" -source sqs "$@"
        "$bin/chaos" -source kafka "$@" ;;
    esac ;;
esac
