#!/usr/bin/env bash
# Connection capacity (issue 43), release build, real processes on 127.0.0.1 only:
#   1. IDLE keep-alive connections held (each after one answered GET): how many, RSS each;
#   2. WAITERS held long-polls (GET /v1/index?wait=): how many, RSS each;
#   3. a fresh client's latency (p50/p99, 200 sequential connections) while 90 % of the cap
#      is held idle, and while half-sent heads hold 150 % of it (answered 200, or 503 at once);
#   4. the server's CPU while those are held, and beside the waiters other clients' 304 rate
#      (wrk, keep-alive) against the same rate with nothing held.
# Beside nginx with Debian's defaults (worker_connections 768 per worker, keepalive_timeout 65)
# serving the same bytes as a static file, in the same run. The clients bind several loopback
# source addresses (127.0.0.1-8), so ports never run out.
#
#   make bench-connections            # CAP=5000 WAITERS=5000 SKIP_BUILD=1 …
set -euo pipefail
source "$(dirname "$0")/bench-common.sh"
source "$ROOT/.ci/postgres-cluster.sh"   # free_port
BIN="${BIN:-$ROOT/.build/release/deltasnap}"
CAP="${CAP:-}"            # serve --max-connections (default: derived from the open-file limit)
WAITERS="${WAITERS:-18000}"
need curl python3 nginx wrk
build_release
make_workspace connections
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
say "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); open-file limit $(ulimit -n); $(date -u +%F)"

"$BIN" import --db "$TMP/store.sqlite" --collection countries "$ROOT/Snapshots/sample/countries.ndjson" >/dev/null
"$BIN" bake --db "$TMP/store.sqlite" --collection countries --out "$TMP/www" >/dev/null
PORT=$(free_port)
start_serve "$BIN" "$TMP/store.sqlite" "$PORT" --log-level warning ${CAP:+--max-connections "$CAP"}
SERVE_CAP=$(grep -o 'connections: at most [0-9]*' "$TMP/serve.err" | grep -o '[0-9]*$')
say "serve: $(grep 'connections:' "$TMP/serve.err")"
probe() { python3 "$ROOT/Benchmarks/connections_probe.py" "$@"; }

NINETY=$((SERVE_CAP * 9 / 10))
SLOW=$((SERVE_CAP * 3 / 2))
say "1. deltasnap: $NINETY idle keep-alive connections (90 % of the cap of $SERVE_CAP)"
probe idle --port "$PORT" --pid "$DS_PID" --count "$NINETY" --hold-path /healthz --label deltasnap
say "2. deltasnap: $WAITERS held long-polls, and other clients' 304 rate alone and beside them (wrk, 5 s each)"
probe waiters --port "$PORT" --pid "$DS_PID" --count "$WAITERS" --rate-seconds 5 --label deltasnap
say "3. deltasnap: $SLOW half-sent heads (150 % of the cap)"
probe slowloris --port "$PORT" --pid "$DS_PID" --count "$SLOW" --label deltasnap
kill -0 "$DS_PID" && say "serve still running: $(vmrss_mb "$DS_PID") MB RSS"

echo '{"status":"ok"}' >"$TMP/www/healthz"
chmod 755 "$TMP" && chmod -R a+rX "$TMP/www"
NGINX_PORT=$(free_port)
NGINX_WORKER_CONNECTIONS=768 start_nginx_with "http://127.0.0.1:$NGINX_PORT/countries.snapshot" <<NGINX
    keepalive_timeout 65;
    server { listen 127.0.0.1:$NGINX_PORT; root $TMP/www; }
NGINX
NGINX_MASTER=$NGINX_PID
NGINX_WORKER=$(pgrep -P "$NGINX_MASTER" | head -1)
NGINX_CAP=$((768 * $(nproc)))
say "4. nginx (Debian defaults: $NGINX_CAP connections): the same holds, measured on one worker"
probe idle --port "$NGINX_PORT" --pid "$NGINX_WORKER" --count $((NGINX_CAP * 9 / 10)) --path /countries.snapshot --hold-path /healthz --label nginx
probe slowloris --port "$NGINX_PORT" --pid "$NGINX_WORKER" --count $((NGINX_CAP * 3 / 2)) --path /countries.snapshot --label nginx
