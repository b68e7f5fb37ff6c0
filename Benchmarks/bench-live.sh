#!/usr/bin/env bash
# Live mode (issue 22, docs/PROTOCOL.md §11), release build, real processes on 127.0.0.1:
#   1. commit -> applied by a waiting `sync --watch --live`, one instance on SQLite: p50/p99;
#   2. the same with the commit on instance A and the client on instance B, one PostgreSQL;
#   3. WAITERS (10,000) held requests: RSS per waiter, one commit answers all, ordinary 304
#      polls while they wait against idle (same sitting);
#   4. a commit storm: wakes per waiter.
#
#   make bench-live                   # ITERATIONS=100 WAITERS=15000 SKIP_BUILD=1 …
set -euo pipefail
source "$(dirname "$0")/bench-common.sh"
source "$ROOT/.ci/postgres-cluster.sh"
BIN="${BIN:-$ROOT/.build/release/deltasnap}"
ITERATIONS="${ITERATIONS:-100}"
WAITERS="${WAITERS:-10000}"
TOKEN=bench-live-token
need curl python3
build_release
make_workspace live
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
cleanup_all() { stop_postgres_cluster; cleanup; }
trap cleanup_all EXIT

say "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); $(date -u +%F)"
"$BIN" import --db "$TMP/store.sqlite" --collection countries "$ROOT/Snapshots/sample/countries.ndjson" >/dev/null
SQLITE_PORT=$(free_port)
start_serve "$BIN" "$TMP/store.sqlite" "$SQLITE_PORT" --write-token "$TOKEN" --max-waiters $((WAITERS + 1000))
SQLITE_PID=$DS_PID
say "1. one instance (SQLite): commit -> applied, $ITERATIONS commits"
python3 "$ROOT/.ci/live_check.py" latency --origin "$SQLITE_PORT" --token "$TOKEN" --bin "$BIN" --work "$TMP" --iterations "$ITERATIONS"
say "3-4. $WAITERS waiters; a commit storm"
python3 "$ROOT/.ci/live_check.py" waiters storm --origin "$SQLITE_PORT" --token "$TOKEN" --server-pid "$SQLITE_PID" \
    --waiters "$WAITERS" --storm-waiters 1000 --bin "$BIN" --work "$TMP"

say "2. two instances on one PostgreSQL: commit on A -> applied by a client waiting on B"
start_postgres_cluster "$TMP"
"$BIN" import --db "$PG_URL" --collection countries "$ROOT/Snapshots/sample/countries.ndjson" >/dev/null
A_PORT=$(free_port)
start_serve "$BIN" "$PG_URL" "$A_PORT" --write-token "$TOKEN"
B_PORT=$(free_port)
start_serve "$BIN" "$PG_URL" "$B_PORT" --write-token "$TOKEN"
python3 "$ROOT/.ci/live_check.py" latency --origin "$A_PORT" --client-port "$B_PORT" --token "$TOKEN" --bin "$BIN" --work "$TMP" --iterations "$ITERATIONS"
