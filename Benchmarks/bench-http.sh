#!/usr/bin/env bash
# HTTP load test: `deltasnap serve` vs nginx serving the same bytes, on 127.0.0.1 only.
#
#   Benchmarks/bench-http.sh            # 34k-record collection, wrk -t2 -c32 -d10s per case
#   RECORDS=50000 DURATION=5s Benchmarks/bench-http.sh
#   BASELINE_BIN=/path/to/old/deltasnap Benchmarks/bench-http.sh   # the old build side by side
#   BASELINE_FIRST=1 BASELINE_BIN=… Benchmarks/bench-http.sh   # the old build first in each round
#   MODES=silent Benchmarks/bench-http.sh   # skip the logged round
#   Benchmarks/bench-http.sh --memory   # also the 1M-record server/client memory check (bench-memory.sh)
#
# With BASELINE_BIN the fixture store is made by the baseline (FIXTURE_BIN) and each server
# serves its own copy of it: a newer build migrates the store it opens (schema 8 → 9), which
# an older build then refuses to open.
#
# Cases: (a) 304 with the current validator, (b) a 12-change delta (nginx sends the same delta
# bytes as a static file), (c) the full gzip body (deltasnap's cached body vs nginx sending the
# baked .snapshot file, same bytes). Two rounds: "silent" (deltasnap --log-level warning, nginx
# access_log off) and "logged" (deltasnap as a user starts it, a request line per answer at
# info; nginx access_log with buffer=64k), so the log line's cost is measured on both.
# nginx runs with worker_processes auto (one worker per core, as deployed; NGINX_WORKERS=1 for
# the older single-worker reference); deltasnap uses one event loop per core. wrk shares the
# same cores. Everything started here is stopped by PID on exit.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
RECORDS="${RECORDS:-34000}"
MODES="${MODES:-silent logged}"
BASELINE_BIN="${BASELINE_BIN:-}"
DURATION="${DURATION:-10s}"
THREADS="${THREADS:-2}"
CONNECTIONS="${CONNECTIONS:-32}"
# The issue-12 reference: nginx with one worker per core, as deployed.
NGINX_WORKERS="${NGINX_WORKERS:-auto}"
DS_PORT="${DS_PORT:-18080}"
NGINX_PORT="${NGINX_PORT:-18081}"
FIXTURE_BIN="${FIXTURE_BIN:-${BASELINE_BIN:-$BIN}}"
RUN_MEMORY=0
[[ "${1:-}" == "--memory" ]] && RUN_MEMORY=1

need nginx wrk curl
build_release
make_workspace bench-http

stop_pid() {
    local pid="$1"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}



if ((RUN_MEMORY)); then
    SKIP_BUILD=1 "$ROOT/Benchmarks/bench-memory.sh"
    exit $?
fi

# ---------------------------------------------------------------- fixtures
DB="$TMP/store.sqlite"
say "importing $RECORDS synthetic records"
"$FIXTURE_BIN" generate --count "$RECORDS" --seed 42 >"$TMP/records.ndjson"
"$FIXTURE_BIN" import --db "$DB" --collection "$COLLECTION" --quiet "$TMP/records.ndjson" >&2
"$FIXTURE_BIN" bake --db "$DB" --collection "$COLLECTION" --out "$TMP/www" >&2
SNAPSHOT="$TMP/www/$COLLECTION.snapshot"
SNAP_BYTES=$(stat -c %s "$SNAPSHOT")

# ---------------------------------------------------------------- nginx
# nginx workers started by root run as "nobody": let them read the baked file.
chmod 755 "$TMP/www"; chmod 644 "$SNAPSHOT"
start_nginx() { # MODE
    NGINX_ACCESS_LOG="access_log off;"
    [[ "$1" == logged ]] && NGINX_ACCESS_LOG="access_log $TMP/nginx/access.log combined buffer=64k flush=1s;"
    start_nginx_with "http://127.0.0.1:$NGINX_PORT/$COLLECTION.snapshot" <<EOF
    sendfile on;
    tcp_nopush on;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        root $TMP/www;
        location / {
            etag on;
            default_type application/octet-stream;
            add_header Content-Encoding gzip;
        }
    }
EOF
}
start_nginx silent

start_serve "$FIXTURE_BIN" "$DB" "$DS_PORT" --log-level warning
DS_URL="http://127.0.0.1:$DS_PORT/v1/collections/$COLLECTION"
NG_URL="http://127.0.0.1:$NGINX_PORT/$COLLECTION.snapshot"

DS_ETAG_OLD="$(etag_of "$DS_URL" -H 'Accept-Encoding: gzip')"
NG_ETAG="$(etag_of "$NG_URL")"
[[ -n "$DS_ETAG_OLD" && -n "$NG_ETAG" ]] || { echo "no ETag (deltasnap '$DS_ETAG_OLD', nginx '$NG_ETAG')" >&2; exit 1; }

# 12 changed records → a new version; the OLD ETag now gets a 12-record delta.
"$FIXTURE_BIN" generate --count 12 --seed 42 --revision 1 | "$FIXTURE_BIN" import --db "$DB" --collection "$COLLECTION" --quiet - >&2
sleep 0.5   # the server notices outside writes by polling (100 ms)
DS_ETAG="$(etag_of "$DS_URL" -H 'Accept-Encoding: gzip')"
[[ "$DS_ETAG" != "$DS_ETAG_OLD" ]] || { echo "ETag did not change after the 12-record import" >&2; exit 1; }
DELTA_STATUS=$(curl -s -o "$TMP/delta.bin" -w '%{http_code}' -H "If-None-Match: $DS_ETAG_OLD" -H 'Accept-Encoding: gzip' "$DS_URL")
DELTA_BYTES=$(stat -c %s "$TMP/delta.bin")
# nginx serves exactly these delta bytes as a static file (case b).
cp "$TMP/delta.bin" "$TMP/www/delta.bin"; chmod 644 "$TMP/www/delta.bin"
NG_DELTA_URL="http://127.0.0.1:$NGINX_PORT/delta.bin"
S304_DS=$(curl -s -o /dev/null -w '%{http_code}' -H "If-None-Match: $DS_ETAG" "$DS_URL")
S304_NG=$(curl -s -o /dev/null -w '%{http_code}' -H "If-None-Match: $NG_ETAG" "$NG_URL")
say "deltasnap ETag $DS_ETAG (old $DS_ETAG_OLD), nginx ETag $NG_ETAG; 304 checks: $S304_DS/$S304_NG; delta: $DELTA_STATUS, $DELTA_BYTES bytes"
[[ "$S304_DS" == 304 && "$S304_NG" == 304 && "$DELTA_STATUS" == 200 ]] || { echo "unexpected status codes" >&2; exit 1; }

# Rebake so nginx serves exactly the bytes deltasnap's full-body cache holds now (checked with cmp).
"$FIXTURE_BIN" bake --db "$DB" --collection "$COLLECTION" --out "$TMP/www" >&2
chmod 644 "$SNAPSHOT"
sleep 0.3
NG_ETAG="$(etag_of "$NG_URL")"
curl -s -H 'Accept-Encoding: gzip' -o "$TMP/ds-full.bin" "$DS_URL"
if cmp -s "$TMP/ds-full.bin" "$SNAPSHOT"; then SAME_BYTES=yes; else SAME_BYTES=NO; fi
FULL_BYTES=$(stat -c %s "$TMP/ds-full.bin")
SNAP_BYTES=$(stat -c %s "$SNAPSHOT")

# ---------------------------------------------------------------- wrk
RESULTS="$TMP/results.tsv"
: >"$RESULTS"
stop_pid "$DS_PID"
stop_pid "$NGINX_PID"
# Each server its own copy of the store (a newer build migrates what it opens).
for server in new old; do copy_store "$DB" "$TMP/store-$server.sqlite"; done
SERVERS=("new:$BIN")
[[ -n "$BASELINE_BIN" ]] && SERVERS+=("old:$BASELINE_BIN")
# BASELINE_FIRST=1: the old build measured first in each round (alternate runs to cancel the order).
[[ -n "$BASELINE_BIN" && -n "${BASELINE_FIRST:-}" ]] && SERVERS=("old:$BASELINE_BIN" "new:$BIN")
for mode in $MODES; do
    start_nginx "$mode"
    NG_ETAG="$(etag_of "$NG_URL")"
    wrk -t"$THREADS" -c"$CONNECTIONS" -d2s -H "If-None-Match: $NG_ETAG" "$NG_URL" >/dev/null 2>&1 || true
    run_wrk "ng-304-$mode" "$NG_URL" "If-None-Match: $NG_ETAG"
    run_wrk "ng-delta12-$mode" "$NG_DELTA_URL" "Accept-Encoding: gzip"
    run_wrk "ng-full-$mode" "$NG_URL" "Accept-Encoding: gzip"
    stop_pid "$NGINX_PID"
    for server in "${SERVERS[@]}"; do
        name="${server%%:*}" bin="${server#*:}"
        db="$TMP/store-$name.sqlite"
        if [[ "$mode" == silent ]]; then start_serve "$bin" "$db" "$DS_PORT" --log-level warning; else start_serve "$bin" "$db" "$DS_PORT"; fi
        WATCH_PIDS=("$DS_PID")
        # Warm the full-body and delta caches as a first client would, then the process
        # itself (the first seconds of the first server measured ran slow in every round).
        curl -s -o /dev/null -H 'Accept-Encoding: gzip' "$DS_URL"
        curl -s -o /dev/null -H 'Accept-Encoding: gzip' -H "If-None-Match: $DS_ETAG_OLD" "$DS_URL"
        wrk -t"$THREADS" -c"$CONNECTIONS" -d2s -H "If-None-Match: $DS_ETAG" "$DS_URL" >/dev/null 2>&1 || true
        run_wrk "$name-304-$mode" "$DS_URL" "If-None-Match: $DS_ETAG"
        run_wrk "$name-delta12-$mode" "$DS_URL" "If-None-Match: $DS_ETAG_OLD" "Accept-Encoding: gzip"
        run_wrk "$name-full-$mode" "$DS_URL" "Accept-Encoding: gzip"
        if [[ "$name" == new && -z "${DS_HWM:-}" ]]; then DS_HWM=$(vmhwm_mb "$DS_PID"); DS_RSS=$(vmrss_mb "$DS_PID"); fi
        stop_pid "$DS_PID"
        WATCH_PIDS=()
    done
done

# ---------------------------------------------------------------- report
get() { awk -F'\t' -v n="$1" -v c="$2" '$1 == n { print $c }' "$RESULTS"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
echo
echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency; $RECORDS records; full body $FULL_BYTES bytes (same bytes as nginx's file: $SAME_BYTES); delta body $DELTA_BYTES bytes (nginx serves the same file); nginx worker_processes $NGINX_WORKERS"
echo
echo "| round  | case        | server | req/s      | p50 ms | p99 ms | ×nginx |"
echo "|--------|-------------|--------|-----------:|-------:|-------:|-------:|"
for mode in $MODES; do
    for case in 304 delta12 full; do
        ng=$(get "ng-$case-$mode" 2)
        printf '| %-6s | %-11s | %-6s | %10s | %6s | %6s | %6s |\n' "$mode" "$case" nginx "$ng" "$(get "ng-$case-$mode" 3)" "$(get "ng-$case-$mode" 4)" "1.00"
        for server in "${SERVERS[@]}"; do
            name="${server%%:*}"
            r=$(get "$name-$case-$mode" 2)
            printf '| %-6s | %-11s | %-6s | %10s | %6s | %6s | %6s |\n' "$mode" "$case" "$name" "$r" "$(get "$name-$case-$mode" 3)" "$(get "$name-$case-$mode" 4)" "$(ratio "$r" "$ng")"
        done
    done
done
if [[ "$MODES" == *silent* && "$MODES" == *logged* ]]; then
    echo
    echo "Logged ÷ silent, each server against itself (the request log's cost; 1.00 = free):"
    for server in "${SERVERS[@]}" "nginx:"; do
        name="${server%%:*}"; key="$name"; [[ "$name" == nginx ]] && key=ng
        printf '  %-6s' "$name"
        for case in 304 delta12 full; do printf '  %s %s' "$case" "$(ratio "$(get "$key-$case-logged" 2)" "$(get "$key-$case-silent" 2)")"; done
        echo
    done
fi
echo
awk -F'\t' '$5 != 0 { printf "warning: %s had %s non-2xx/3xx responses\n", $1, $5 }' "$RESULTS"
echo "deltasnap serve (new, first round): VmHWM ${DS_HWM:-?} MB, VmRSS ${DS_RSS:-?} MB after its runs"
if [[ -n "${KEEP_WRK:-}" ]]; then cp "$TMP"/wrk-*.txt "$KEEP_WRK"/; fi
