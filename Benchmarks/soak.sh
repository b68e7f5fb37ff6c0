#!/usr/bin/env bash
# Soak: a bounded run of SOAK_REQUESTS polls (304s, deltas and full gzip bodies, see soak.lua)
# over CONNECTIONS connections while a writer keeps changing records through the write API.
# Fails when any request fails (a status other than 200/304, or a socket error), when the
# server dies, or when its RSS at the end exceeds its RSS after the warm-up by more than
# RSS_SLACK_MB. Loopback only; everything started here is stopped by PID.
#
#   Benchmarks/soak.sh                                    # 1,000,000 requests, release build
#   SOAK_REQUESTS=20000 BIN=.build/debug/deltasnap Benchmarks/soak.sh   # the short CI form
set -euo pipefail

GIVEN_BIN="${BIN:-}"
source "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
BIN="${GIVEN_BIN:-$BIN}"
SOAK_REQUESTS="${SOAK_REQUESTS:-1000000}"
WARMUP_REQUESTS="${WARMUP_REQUESTS:-$((SOAK_REQUESTS / 10))}"
RECORDS="${RECORDS:-2000}"
THREADS="${THREADS:-2}"
CONNECTIONS="${CONNECTIONS:-32}"
RSS_SLACK_MB="${RSS_SLACK_MB:-8}"
# An upper bound on each wrk run: the request count ends it, this only stops a hang.
MAX_SECONDS="${MAX_SECONDS:-900}"
TOKEN=soak-write-token

need wrk curl
if [[ "$BIN" == "$ROOT/.build/release/deltasnap" ]]; then build_release; fi
[[ -x "$BIN" ]] || { echo "soak: $BIN is missing" >&2; exit 1; }
make_workspace soak

DB="$TMP/store.sqlite"
"$BIN" generate --count "$RECORDS" --seed 7 >"$TMP/records.ndjson"
"$BIN" import --db "$DB" --collection "$COLLECTION" --quiet "$TMP/records.ndjson" >&2
"$BIN" serve --db "$DB" --host 127.0.0.1 --port 0 --write-token "$TOKEN" --log-level notice \
    >"$TMP/serve.out" 2>"$TMP/serve.err" &
DS_PID=$!
PIDS+=("$DS_PID")
PORT=""
for _ in $(seq 1 300); do
    PORT="$(sed -n 's#^deltasnap: serving .* on http://127.0.0.1:\([0-9]*\) .*#\1#p' "$TMP/serve.out")"
    [[ -n "$PORT" ]] && break
    kill -0 "$DS_PID" 2>/dev/null || { cat "$TMP/serve.err" >&2; echo "soak: deltasnap serve exited" >&2; exit 1; }
    sleep 0.1
done
[[ -n "$PORT" ]] || { echo "soak: deltasnap serve did not start" >&2; exit 1; }
URL="http://127.0.0.1:$PORT/v1/collections/$COLLECTION"
etag() { curl -s -o /dev/null -D - -H 'Accept-Encoding: gzip' "$URL" | tr -d '\r' | awk -F': ' 'tolower($1) == "etag" { print $2 }'; }

OLD_ETAG="$(etag)"
# 12 changes, so the old ETag is a delta from the first request on.
for i in $(seq 1 12); do
    curl -sf -o /dev/null -X PUT -H "Authorization: Bearer $TOKEN" --data "{\"n\":$i,\"phase\":\"setup\"}" "$URL/records/soak-$i"
done
ETAG="$(etag)"
[[ -n "$OLD_ETAG" && "$ETAG" != "$OLD_ETAG" ]] || { echo "soak: no new ETag after the setup writes" >&2; exit 1; }

# The writer: one upsert every 20 ms over 50 records, until stopped.
writer() {
    local n=0
    while true; do
        n=$((n + 1))
        curl -s -o /dev/null -X PUT -H "Authorization: Bearer $TOKEN" --data "{\"n\":$n}" "$URL/records/soak-$((n % 50))" || true
        sleep 0.02
    done
}

run_wrk() { # NAME REQUESTS
    local name="$1" requests="$2"
    local done_file="$TMP/done-$name"
    : >"$done_file"
    SOAK_PATH="/v1/collections/$COLLECTION" SOAK_ETAG="$ETAG" SOAK_OLD_ETAG="$OLD_ETAG" \
    SOAK_REQUESTS="$requests" SOAK_THREADS="$THREADS" SOAK_DONE_FILE="$done_file" \
        wrk -t"$THREADS" -c"$CONNECTIONS" -d"${MAX_SECONDS}s" --timeout 10s --latency \
        -s "$ROOT/Benchmarks/soak.lua" "http://127.0.0.1:$PORT" >"$TMP/wrk-$name.txt" 2>&1 &
    local wrk_pid=$!
    PIDS+=("$wrk_pid")
    # wrk sleeps out -d even when its threads are done: SIGINT ends it with its report.
    while kill -0 "$wrk_pid" 2>/dev/null && (( $(wc -l <"$done_file") < THREADS )); do sleep 0.2; done
    kill -INT "$wrk_pid" 2>/dev/null || true
    wait "$wrk_pid" 2>/dev/null || true
    kill -0 "$DS_PID" 2>/dev/null || { head -40 "$TMP/serve.err" >&2; echo "soak: the server died during $name" >&2; exit 1; }
}
rss_kb() { awk '/VmRSS/ { print $2 }' "/proc/$DS_PID/status"; }

say "warm-up: $WARMUP_REQUESTS requests"
run_wrk warmup "$WARMUP_REQUESTS"
RSS_WARM=$(rss_kb)

writer &
WRITER_PID=$!
PIDS+=("$WRITER_PID")
say "soak: $SOAK_REQUESTS requests over $CONNECTIONS connections while writes go on"
START=$(date +%s.%N)
run_wrk soak "$SOAK_REQUESTS"
END=$(date +%s.%N)
kill "$WRITER_PID" 2>/dev/null || true; wait "$WRITER_PID" 2>/dev/null || true
RSS_END=$(rss_kb)
HEADS="$(curl -s "http://127.0.0.1:$PORT/v1/collections")"
HEAD_COUNT=$(sed -n 's/.*"count":\([0-9]*\).*/\1/p' <<<"$HEADS")
HEAD_VERSION=$(sed -n 's/.*"token":"[0-9a-f]*\.\([0-9]*\)".*/\1/p' <<<"$HEADS")

report="$TMP/wrk-soak.txt"
counts="$(grep '^soak-counts' "$report" || true)"
answered=$(sed -n 's/.*answered=\([0-9]*\).*/\1/p' <<<"$counts")
other=$(sed -n 's/.*other=\([0-9]*\).*/\1/p' <<<"$counts")
socket_errors="$(grep 'Socket errors' "$report" || true)"
echo
grep -E "Requests/sec|Latency |^ +(50|99)%|Socket errors|Non-2xx" "$report" || true
echo "$counts"
awk -v s="$START" -v e="$END" -v w="$RSS_WARM" -v r="$RSS_END" 'BEGIN {
    printf "soak: %.1f s; server RSS %.1f MB after warm-up, %.1f MB at the end (%+.1f MB); %s records at version %s\n",
        e - s, w / 1024, r / 1024, (r - w) / 1024, "'"$HEAD_COUNT"'", "'"$HEAD_VERSION"'" }'

fail=0
[[ -n "$answered" && "$answered" -ge "$SOAK_REQUESTS" ]] || { echo "soak: only ${answered:-0} of $SOAK_REQUESTS requests were answered" >&2; fail=1; }
[[ "${other:-1}" -eq 0 ]] || { echo "soak: $other requests got a status other than 200/304" >&2; fail=1; }
[[ -z "$socket_errors" ]] || { echo "soak: $socket_errors" >&2; fail=1; }
(( RSS_END - RSS_WARM <= RSS_SLACK_MB * 1024 )) || { echo "soak: RSS grew by more than $RSS_SLACK_MB MB" >&2; fail=1; }
if grep -q "request failed" "$TMP/serve.err"; then grep "request failed" "$TMP/serve.err" | head -3 >&2; fail=1; fi
((fail == 0)) || exit 1
echo "soak: passed"
