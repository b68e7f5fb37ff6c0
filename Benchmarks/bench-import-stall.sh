#!/usr/bin/env bash
# Does a long import stall the server? 304 polls on their own connections, idle and while a
# ~30 MB batch is imported through the write API (POST /v1/collections/NAME/records), on
# 127.0.0.1 only. Prints the polls' p50/p99 in both phases, per build.
#
#   Benchmarks/bench-import-stall.sh
#   BASELINE_BIN=/path/to/old/deltasnap Benchmarks/bench-import-stall.sh   # old build side by side
#   BATCH_RECORDS=150000 DURATION=6s Benchmarks/bench-import-stall.sh
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
BATCH_RECORDS="${BATCH_RECORDS:-150000}"
DURATION="${DURATION:-6s}"
THREADS=1
CONNECTIONS="${CONNECTIONS:-8}"
DS_PORT="${DS_PORT:-18090}"
BASELINE_BIN="${BASELINE_BIN:-}"
TOKEN=bench-token

need wrk curl
build_release
make_workspace bench-stall

"$BIN" generate --count 1000 --seed 7 >"$TMP/seed.ndjson"
"$BIN" generate --count "$BATCH_RECORDS" --seed 8 >"$TMP/batch.ndjson"
BATCH_BYTES=$(stat -c %s "$TMP/batch.ndjson")
RESULTS="$TMP/results.tsv"
: >"$RESULTS"

SERVERS=("new:$BIN")
[[ -n "$BASELINE_BIN" ]] && SERVERS+=("old:$BASELINE_BIN")
for server in "${SERVERS[@]}"; do
    name="${server%%:*}" bin="${server#*:}"
    db="$TMP/$name.sqlite"
    "$bin" import --db "$db" --collection polled --quiet "$TMP/seed.ndjson" >/dev/null
    "$bin" serve --db "$db" --host 127.0.0.1 --port "$DS_PORT" --write-token "$TOKEN" --log-level warning \
        >"$TMP/serve-$name.out" 2>"$TMP/serve-$name.err" &
    pid=$!
    PIDS+=("$pid")
    WATCH_PIDS=("$pid")
    for _ in $(seq 1 300); do grep -q "deltasnap: serving" "$TMP/serve-$name.out" 2>/dev/null && break; sleep 0.1; done
    url="http://127.0.0.1:$DS_PORT/v1/collections/polled"
    etag="$(etag_of "$url")"
    run_wrk "$name-idle" "$url" "If-None-Match: $etag"
    # The import starts a moment after the polls, and takes longer than they run.
    (sleep 1; curl -s -o "$TMP/import-$name.json" -w '%{http_code} %{time_total}\n' -X POST \
        -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/x-ndjson' \
        --data-binary @"$TMP/batch.ndjson" "http://127.0.0.1:$DS_PORT/v1/collections/imported/records" >"$TMP/import-$name.status") &
    importer=$!
    run_wrk "$name-importing" "$url" "If-None-Match: $etag"
    wait "$importer" || true
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
    WATCH_PIDS=()
done

get() { awk -F'\t' -v n="$1" -v c="$2" '$1 == n { print $c }' "$RESULTS"; }
echo
echo "304 polls, wrk -t$THREADS -c$CONNECTIONS -d$DURATION, idle and while a $BATCH_RECORDS-record batch ($BATCH_BYTES bytes) is POSTed"
echo
echo "| build | idle req/s | idle p50 ms | idle p99 ms | importing req/s | importing p50 ms | importing p99 ms | import (status, seconds) |"
echo "|-------|-----------:|------------:|------------:|----------------:|-----------------:|-----------------:|--------------------------|"
for server in "${SERVERS[@]}"; do
    name="${server%%:*}"
    printf '| %-5s | %10s | %11s | %11s | %15s | %16s | %16s | %-24s |\n' "$name" \
        "$(get "$name-idle" 2)" "$(get "$name-idle" 3)" "$(get "$name-idle" 4)" \
        "$(get "$name-importing" 2)" "$(get "$name-importing" 3)" "$(get "$name-importing" 4)" "$(cat "$TMP/import-$name.status")"
done
