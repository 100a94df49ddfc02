#!/usr/bin/env bash
# The body of `make chaos`: run the chaos driver (flags are passed on)
# against the servers in the environment, or against a private set it
# starts here and stops afterwards, by PID.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

if [ -z "${ONCEQ_DYNAMODB_ENDPOINT:-}" ] || [ -z "${ONCEQ_SQS_ENDPOINT:-}" ]; then
  export ONCEQ_RUN_DIR="${ONCEQ_RUN_DIR:-$here/.run/chaos}"
  bash "$here/servers.sh" start
  trap 'bash "$here/servers.sh" stop' EXIT
  set -a
  # shellcheck disable=SC1091
  . "$ONCEQ_RUN_DIR/env"
  set +a
fi
cd "$root"
go run ./integration/chaos "$@"
