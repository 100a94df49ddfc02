#!/usr/bin/env bash
# The body of `make test`: start the real servers, run every test with the
# race detector against them, stop exactly what was started.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

# docker-compose.yml, for users with Docker (there is none here): loaded as
# Compose loads it (schema, interpolation) and checked for what it promises.
# A module of its own, so the library's go.mod never requires compose-go.
(cd "$here/composecheck" && go test -count=1 ./...)

export ONCEQ_RUN_DIR="${ONCEQ_RUN_DIR:-$here/.run}"
bash "$here/servers.sh" start
trap 'bash "$here/servers.sh" stop' EXIT
set -a
# shellcheck disable=SC1091
. "$ONCEQ_RUN_DIR/env"
set +a

cd "$root"
go test -race -count=1 -timeout 14m github.com/onceq/onceq/...
