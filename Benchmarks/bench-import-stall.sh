#!/usr/bin/env bash
# Does a long import stall the server? 304 polls on their own connections, idle and while
# ~30 MB batches are imported one after another through the write API (POST
# /v1/collections/NAME/records, two alternating batches, so every import rewrites every
# record), on 127.0.0.1 only. Two kinds of poll: plain ones (answered before the HTTP decoder,
# on the event loops) and ones that go through the router (a `Connection: keep-alive` header
# sends them there), which share Swift's cooperative pool with the import's request task.
# Prints p50/p99 in both phases, per build.
#
#   Benchmarks/bench-import-stall.sh
#   BASELINE_BIN=/path/to/old/deltasnap Benchmarks/bench-import-stall.sh   # old build side by side
#   BATCH_RECORDS=150000 DURATION=6s Benchmarks/bench-import-stall.sh
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
BATCH_RECORDS="${BATCH_RECORDS:-95000}"
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
"$BIN" generate --count "$BATCH_RECORDS" --seed 8 >"$TMP/batch-a.ndjson"
"$BIN" generate --count "$BATCH_RECORDS" --seed 8 --revision 1 >"$TMP/batch-b.ndjson"
BATCH_BYTES=$(stat -c %s "$TMP/batch-a.ndjson")
RESULTS="$TMP/results.tsv"
: >"$RESULTS"

SERVERS=("new:$BIN")
[[ -n "$BASELINE_BIN" ]] && SERVERS+=("old:$BASELINE_BIN")
for server in "${SERVERS[@]}"; do
    name="${server%%:*}" bin="${server#*:}"
    db="$TMP/$name.sqlite"
    "$bin" import --db "$db" --collection polled --quiet "$TMP/seed.ndjson" >/dev/null
    # Default flags but --log-level warning: by default 304s are not logged anyway; it keeps
    # the imports' own request lines out of the comparison.
    start_serve "$bin" "$db" "$DS_PORT" --write-token "$TOKEN" --log-level warning
    WATCH_PIDS=("$DS_PID")
    url="http://127.0.0.1:$DS_PORT/v1/collections/polled"
    etag="$(etag_of "$url")"
    run_wrk "$name-idle" "$url" "If-None-Match: $etag"
    run_wrk "$name-router-idle" "$url" "If-None-Match: $etag" "Connection: keep-alive"
    for kind in plain router; do
        # Imports run back to back until the polls have been measured.
        : >"$TMP/imports-$name-$kind"
        (
            batch=a
            while [[ ! -e "$TMP/stop-$name-$kind" ]]; do
                curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -X POST \
                    -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/x-ndjson' \
                    --data-binary @"$TMP/batch-$batch.ndjson" "http://127.0.0.1:$DS_PORT/v1/collections/imported/records" >>"$TMP/imports-$name-$kind"
                [[ "$batch" == a ]] && batch=b || batch=a
            done
        ) &
        importer=$!
        sleep 1   # the first import is under way
        if [[ "$kind" == plain ]]; then
            run_wrk "$name-importing" "$url" "If-None-Match: $etag"
        else
            run_wrk "$name-router-importing" "$url" "If-None-Match: $etag" "Connection: keep-alive"
        fi
        touch "$TMP/stop-$name-$kind"
        wait "$importer" || true
    done
    kill "$DS_PID" 2>/dev/null; wait "$DS_PID" 2>/dev/null || true
    WATCH_PIDS=()
done

get() { awk -F'\t' -v n="$1" -v c="$2" '$1 == n { print $c }' "$RESULTS"; }
imports() { awk '{ n++; if ($1 == 200) ok++; t += $2 } END { printf "%d (%d ok, %.2f s each)", n, ok, (n ? t / n : 0) }' "$1"; }
echo
echo "304 polls, wrk -t$THREADS -c$CONNECTIONS -d$DURATION; while importing, $BATCH_RECORDS-record batches ($BATCH_BYTES bytes) are POSTed back to back"
echo
echo "| build | polls  | idle req/s | idle p50 ms | idle p99 ms | importing req/s | importing p50 ms | importing p99 ms | imports meanwhile |"
echo "|-------|--------|-----------:|------------:|------------:|----------------:|-----------------:|-----------------:|-------------------|"
for server in "${SERVERS[@]}"; do
    name="${server%%:*}"
    for kind in plain router; do
        idle="$name-idle" busy="$name-importing"
        [[ "$kind" == router ]] && idle="$name-router-idle" busy="$name-router-importing"
        printf '| %-5s | %-6s | %10s | %11s | %11s | %15s | %16s | %16s | %-17s |\n' "$name" "$kind" \
            "$(get "$idle" 2)" "$(get "$idle" 3)" "$(get "$idle" 4)" \
            "$(get "$busy" 2)" "$(get "$busy" 3)" "$(get "$busy" 4)" "$(imports "$TMP/imports-$name-$kind")"
    done
done
