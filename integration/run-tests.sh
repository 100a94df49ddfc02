#!/usr/bin/env bash
# The body of `make test`: start the real servers, run every test with the
# race detector against them, stop exactly what was started.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

export ONCEQ_RUN_DIR="${ONCEQ_RUN_DIR:-$here/.run}"
bash "$here/servers.sh" start
trap 'bash "$here/servers.sh" stop' EXIT
set -a
# shellcheck disable=SC1091
. "$ONCEQ_RUN_DIR/env"
set +a

cd "$root"
go test -race -count=1 -timeout 14m ./...
