#!/usr/bin/env bash
# Scale-out benchmark, all in one run on 127.0.0.1: one `serve` on SQLite, two `serve`
# instances on one PostgreSQL behind an nginx load balancer, and nginx serving the baked file.
#
#   Benchmarks/bench-postgres.sh                    # 10k records, wrk -t2 -c32 -d10s per case
#   MILLION=1 Benchmarks/bench-postgres.sh          # also: 1,000,000 records into PostgreSQL,
#                                                   # their full body streamed (time, server memory)
#
# Also measures the import rate into PostgreSQL (COPY) next to SQLite's, IMPORT_RECORDS
# (200,000) records. Everything started here is stopped by PID on exit.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
source "$ROOT/.ci/postgres-cluster.sh"
RECORDS="${RECORDS:-10000}"
IMPORT_RECORDS="${IMPORT_RECORDS:-200000}"
DURATION="${DURATION:-10s}"
THREADS="${THREADS:-2}"
CONNECTIONS="${CONNECTIONS:-32}"
MILLION="${MILLION:-0}"

need nginx wrk curl
build_release
make_workspace bench-postgres
trap 'stop_postgres_cluster; cleanup' EXIT

rate_of() { sed -n 's/.*, \([0-9]*\) records\/s\].*/\1/p' | tail -1; }

# Starts `deltasnap serve --db DB` on a free port; sets SERVE_PORT and SERVE_PID.
start_serve() { # NAME DB
    SERVE_PORT=$(free_port)
    "$BIN" serve --db "$2" --host 127.0.0.1 --port "$SERVE_PORT" --log-level warning >"$TMP/serve-$1.out" 2>"$TMP/serve-$1.err" &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
    for _ in $(seq 1 300); do
        grep -q "deltasnap: serving" "$TMP/serve-$1.out" 2>/dev/null && return 0
        kill -0 "$SERVE_PID" 2>/dev/null || { cat "$TMP/serve-$1.err" >&2; exit 1; }
        sleep 0.1
    done
    echo "serve $1 did not start" >&2; exit 1
}

# ---------------------------------------------------------------- stores
say "PostgreSQL"
start_postgres_cluster "$TMP"
SQLITE="$TMP/store.sqlite"
say "importing $RECORDS records into SQLite and PostgreSQL"
"$BIN" generate --count "$RECORDS" --seed 42 >"$TMP/records.ndjson"
"$BIN" import --db "$SQLITE" --collection "$COLLECTION" --quiet "$TMP/records.ndjson" >&2
"$BIN" import --db "$PG_URL" --collection "$COLLECTION" --quiet "$TMP/records.ndjson" >&2
"$BIN" bake --db "$SQLITE" --collection "$COLLECTION" --out "$TMP/www" >&2

say "import rate: $IMPORT_RECORDS records"
"$BIN" generate --count "$IMPORT_RECORDS" --seed 7 >"$TMP/import.ndjson"
SQLITE_IMPORT=$("$BIN" import --db "$TMP/import.sqlite" --collection big "$TMP/import.ndjson" | rate_of)
PG_IMPORT=$("$BIN" import --db "$PG_URL" --collection big "$TMP/import.ndjson" | rate_of)

# ---------------------------------------------------------------- servers
start_serve sqlite "$SQLITE"; SQ_PORT=$SERVE_PORT; SQ_PID=$SERVE_PID
start_serve pg1 "$PG_URL"; PG1_PORT=$SERVE_PORT; PG1_PID=$SERVE_PID
start_serve pg2 "$PG_URL"; PG2_PORT=$SERVE_PORT; PG2_PID=$SERVE_PID
LB_PORT=$(free_port); STATIC_PORT=$(free_port)
chmod 755 "$TMP/www"; chmod 644 "$TMP/www/$COLLECTION.snapshot"
start_nginx_with "http://127.0.0.1:$STATIC_PORT/$COLLECTION.snapshot" <<CONF
    upstream deltasnap { server 127.0.0.1:$PG1_PORT; server 127.0.0.1:$PG2_PORT; keepalive 64; }
    server {
        listen 127.0.0.1:$LB_PORT;
        # Bodies buffered in memory (64 KiB reads, never spooled to temporary files): nginx's
        # defaults (4 KiB buffers and temp files, or unbuffered 4 KiB writes) cut full-body
        # throughput by 5–10× here.
        location / {
            proxy_pass http://deltasnap; proxy_http_version 1.1; proxy_set_header Connection "";
            proxy_buffers 32 64k; proxy_buffer_size 64k; proxy_busy_buffers_size 128k; proxy_max_temp_file_size 0;
        }
    }
    server {
        listen 127.0.0.1:$STATIC_PORT;
        root $TMP/www;
        sendfile on;
        location / { etag on; default_type application/octet-stream; add_header Content-Encoding gzip; }
    }
CONF
SQ_URL="http://127.0.0.1:$SQ_PORT/v1/collections/$COLLECTION"
PG_URL_HTTP="http://127.0.0.1:$LB_PORT/v1/collections/$COLLECTION"
NG_URL="http://127.0.0.1:$STATIC_PORT/$COLLECTION.snapshot"
for _ in $(seq 1 100); do curl -sf -o /dev/null "$NG_URL" && curl -sf -o /dev/null "$PG_URL_HTTP" && break; sleep 0.1; done

SQ_OLD=$(etag_of "$SQ_URL"); PG_OLD=$(etag_of "$PG_URL_HTTP"); NG_ETAG=$(etag_of "$NG_URL")
"$BIN" generate --count 12 --seed 42 --revision 1 >"$TMP/change.ndjson"
"$BIN" import --db "$SQLITE" --collection "$COLLECTION" --quiet "$TMP/change.ndjson" >&2
"$BIN" import --db "$PG_URL" --collection "$COLLECTION" --quiet "$TMP/change.ndjson" >&2
sleep 0.5
SQ_ETAG=$(etag_of "$SQ_URL"); PG_ETAG=$(etag_of "$PG_URL_HTTP")
[[ "$SQ_ETAG" != "$SQ_OLD" && "$PG_ETAG" != "$PG_OLD" && -n "$NG_ETAG" ]] || { echo "ETags did not move ($SQ_OLD→$SQ_ETAG, $PG_OLD→$PG_ETAG)" >&2; exit 1; }
# The same state on both stores: the same full body bytes (up to the epoch in the token).
curl -s -H 'Accept-Encoding: gzip' "$SQ_URL" | gzip -dc | tail -n +2 >"$TMP/sq.body"
curl -s -H 'Accept-Encoding: gzip' "$PG_URL_HTTP" | gzip -dc | tail -n +2 >"$TMP/pg.body"
cmp -s "$TMP/sq.body" "$TMP/pg.body" && SAME_RECORDS=yes || SAME_RECORDS=NO

# ---------------------------------------------------------------- wrk
RESULTS="$TMP/results.tsv"
: >"$RESULTS"
WATCH_PIDS=("$SQ_PID" "$PG1_PID" "$PG2_PID")
PG1_URL="http://127.0.0.1:$PG1_PORT/v1/collections/$COLLECTION"
run_wrk sq-304 "$SQ_URL" "If-None-Match: $SQ_ETAG"
run_wrk p1-304 "$PG1_URL" "If-None-Match: $PG_ETAG"
run_wrk pg-304 "$PG_URL_HTTP" "If-None-Match: $PG_ETAG"
run_wrk ng-304 "$NG_URL" "If-None-Match: $NG_ETAG"
run_wrk sq-delta "$SQ_URL" "If-None-Match: $SQ_OLD" "Accept-Encoding: gzip"
run_wrk p1-delta "$PG1_URL" "If-None-Match: $PG_OLD" "Accept-Encoding: gzip"
run_wrk pg-delta "$PG_URL_HTTP" "If-None-Match: $PG_OLD" "Accept-Encoding: gzip"
run_wrk sq-full "$SQ_URL" "Accept-Encoding: gzip"
run_wrk p1-full "$PG1_URL" "Accept-Encoding: gzip"
run_wrk pg-full "$PG_URL_HTTP" "Accept-Encoding: gzip"
run_wrk ng-full "$NG_URL" "Accept-Encoding: gzip"

# ---------------------------------------------------------------- head latency
# A commit by another process (an import), then how long until each instance answers with
# the new ETag: LISTEN/NOTIFY, measured from the importer's exit (the commit is earlier).
say "head latency: 20 commits"
LATENCIES="$TMP/latency.txt"
: >"$LATENCIES"
for n in $(seq 1 20); do
    token=$(echo "{\"id\":\"latency\",\"n\":$n}" | "$BIN" import --db "$PG_URL" --collection "$COLLECTION" --quiet - 2>/dev/null \
        | sed -n 's/.*(token \([^)]*\)).*/\1/p')
    start=$(date +%s%N)
    want="\"$token\""
    for port in "$PG1_PORT" "$PG2_PORT"; do
        for _ in $(seq 1 2000); do
            [[ "$(etag_of "http://127.0.0.1:$port/v1/collections/$COLLECTION")" == "$want" ]] && break
            sleep 0.002
        done
        echo $(( ($(date +%s%N) - start) / 1000000 )) >>"$LATENCIES"
    done
done
HEAD_LATENCY=$(sort -n "$LATENCIES" | awk '{ v[NR] = $1 } END { printf "median %d ms, max %d ms over %d observations", v[int((NR + 1) / 2)], v[NR], NR }')

# ---------------------------------------------------------------- report
get() { awk -F'\t' -v n="$1" -v c="$2" '$1 == n { print $c }' "$RESULTS"; }
cell() { [[ -n "$(get "$1" 2)" ]] && printf '%s (p99 %s ms)' "$(get "$1" 2)" "$(get "$1" 4)" || printf -- '-'; }
echo
echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION; $RECORDS records; nginx worker_processes auto; $(nproc) cores shared by everything"
echo
echo "| case | SQLite, 1 instance | PostgreSQL, 1 instance | PostgreSQL, 2 instances behind nginx | nginx, static file |"
echo "|---|---:|---:|---:|---:|"
echo "| 304 Not Modified | $(cell sq-304) | $(cell p1-304) | $(cell pg-304) | $(cell ng-304) |"
echo "| 12-change delta (gzip) | $(cell sq-delta) | $(cell p1-delta) | $(cell pg-delta) | - |"
echo "| full gzip body | $(cell sq-full) | $(cell p1-full) | $(cell pg-full) | $(cell ng-full) |"
echo
echo "import of $IMPORT_RECORDS records: SQLite $SQLITE_IMPORT records/s, PostgreSQL $PG_IMPORT records/s"
echo "same records from both stores: $SAME_RECORDS"
echo "a commit made by another process reaches both instances: $HEAD_LATENCY (curl polls included)"
awk -F'\t' '$5 != 0 { printf "warning: %s had %s non-2xx/3xx responses\n", $1, $5 }' "$RESULTS"
echo "VmHWM: SQLite instance $(vmhwm_mb "$SQ_PID") MB, PostgreSQL instances $(vmhwm_mb "$PG1_PID") / $(vmhwm_mb "$PG2_PID") MB"

if [[ "$MILLION" == 1 ]]; then
    say "1,000,000 records into PostgreSQL"
    "$BIN" generate --count 1000000 --seed 11 >"$TMP/million.ndjson"
    MILLION_IMPORT=$("$BIN" import --db "$PG_URL" --collection million "$TMP/million.ndjson" | rate_of)
    rm -f "$TMP/million.ndjson"
    sleep 0.5
    BEFORE=$(vmhwm_mb "$PG1_PID")
    START=$(date +%s.%N)
    BYTES=$(curl -s -H 'Accept-Encoding: gzip' "http://127.0.0.1:$PG1_PORT/v1/collections/million" | wc -c)
    END=$(date +%s.%N)
    echo "1,000,000 records: import $MILLION_IMPORT records/s; full gzip body $BYTES bytes streamed in $(awk -v a="$START" -v b="$END" 'BEGIN { printf "%.2f", b - a }') s; instance VmHWM $BEFORE MB before, $(vmhwm_mb "$PG1_PID") MB after"
fi
