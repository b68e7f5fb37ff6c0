#!/usr/bin/env bash
# Live mode from outside (docs/PROTOCOL.md §11), with real processes on 127.0.0.1:
#   - WAITERS held requests on one `deltasnap serve`: all answered after one commit, the
#     server's RSS per waiter printed; a commit storm wakes each waiter a bounded number of times;
#   - CLIENTS clients waiting through nginx proxy_cache (proxy_cache_lock): one origin
#     request per change;
#   - `deltasnap sync --watch --live` through an nginx whose proxy_read_timeout (1 s) is
#     shorter than the wait: the client falls back and still converges.
# The server and nginx are stopped by PID on exit.
#
#   .ci/live-tests.sh                       # CI: 10,000 waiters, 200 clients
#   WAITERS=15000 BIN=.build/release/deltasnap .ci/live-tests.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BIN="${BIN:-$ROOT/.build/debug/deltasnap}"
WAITERS="${WAITERS:-10000}"
CLIENTS="${CLIENTS:-200}"
STORM_WAITERS="${STORM_WAITERS:-200}"
# Bounds the whole run: CI must fail rather than hang.
TIME_LIMIT="${TIME_LIMIT:-300}"
TOKEN="live-tests-write-token"

[ -x "$BIN" ] || { echo "live-tests: $BIN is missing; run 'swift build' first" >&2; exit 1; }
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { echo "live-tests: nginx is missing (.ci/install-deps.sh installs it)" >&2; exit 1; }
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"

WORK="$(mktemp -d /tmp/deltasnap-live-XXXXXX)"
chmod 755 "$WORK"
SERVER_PID=""
NGINX_PID=""
cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
    [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null && wait "$NGINX_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Each waiter is a descriptor on both sides.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((WAITERS + 1000)) ]; then
    echo "live-tests: the descriptor limit ($(ulimit -n)) is below $((WAITERS + 1000)); lowering WAITERS" >&2
    WAITERS=$(( $(ulimit -n) - 1000 ))
fi

"$BIN" import --db "$WORK/store.sqlite" --collection countries Snapshots/sample/countries.ndjson >/dev/null
ORIGIN=$(free_port)
"$BIN" serve --db "$WORK/store.sqlite" --port "$ORIGIN" --write-token "$TOKEN" --max-waiters $((WAITERS + 1000)) \
    --log-level warning > "$WORK/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 100); do grep -q "serving" "$WORK/serve.log" 2>/dev/null && break; sleep 0.1; done
grep -q "serving" "$WORK/serve.log" || { cat "$WORK/serve.log" >&2; echo "live-tests: the server did not start" >&2; exit 1; }

CACHE=$(free_port)
CUT=$(free_port)
mkdir -p "$WORK/nginx/cache" "$WORK/nginx/tmp"
chmod -R 777 "$WORK/nginx"
cat > "$WORK/nginx/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
    log_format origin '\$request_uri \$status \$upstream_cache_status \$upstream_addr';
    access_log $WORK/nginx/access.log origin;
    client_body_temp_path $WORK/nginx/tmp/body;
    proxy_temp_path $WORK/nginx/tmp/proxy;
    fastcgi_temp_path $WORK/nginx/tmp/fastcgi;
    uwsgi_temp_path $WORK/nginx/tmp/uwsgi;
    scgi_temp_path $WORK/nginx/tmp/scgi;
    proxy_cache_path $WORK/nginx/cache levels=1:2 keys_zone=live:10m max_size=64m inactive=10m use_temp_path=off;
    # The shared cache of docs/PROTOCOL.md §11: waiters on one URL wait on one origin request.
    server {
        listen 127.0.0.1:$CACHE;
        location / {
            proxy_pass http://127.0.0.1:$ORIGIN;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache live;
            proxy_cache_lock on;
            proxy_cache_lock_timeout 70s;
            proxy_cache_lock_age 70s;
            proxy_read_timeout 70s;
        }
    }
    # A proxy that cuts held requests: its read timeout is shorter than any wait.
    server {
        listen 127.0.0.1:$CUT;
        location / {
            proxy_pass http://127.0.0.1:$ORIGIN;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_read_timeout 1s;
        }
    }
}
EOF
"$NGINX" -e "$WORK/nginx/error.log" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" &
NGINX_PID=$!
for _ in $(seq 1 50); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $CACHE), 1)" 2>/dev/null && break; sleep 0.1; done

echo "live-tests: server pid $SERVER_PID on $ORIGIN, nginx cache on $CACHE, cutting proxy on $CUT"
timeout "$TIME_LIMIT" python3 .ci/live_check.py cache fallback waiters storm \
    --origin "$ORIGIN" --cache "$CACHE" --cut "$CUT" --nginx-log "$WORK/nginx/access.log" --token "$TOKEN" \
    --server-pid "$SERVER_PID" --bin "$BIN" --work "$WORK" --clients "$CLIENTS" --waiters "$WAITERS" \
    --storm-waiters "$STORM_WAITERS" ${MAX_KB_PER_WAITER:+--max-kb-per-waiter "$MAX_KB_PER_WAITER"}
if grep -q "request failed" "$WORK/serve.log"; then
    grep "request failed" "$WORK/serve.log" | head -5 >&2
    echo "live-tests: the server logged a failed request" >&2
    exit 1
fi
echo "live-tests: passed"
