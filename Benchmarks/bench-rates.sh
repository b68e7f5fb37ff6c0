#!/usr/bin/env bash
# Import and client-apply rates on the path a user takes: `deltasnap import` of an NDJSON file
# into a fresh SQLite store, and the first `deltasnap pull` of the full body into an empty
# replica (download, verify, apply, commit), each timed as a whole process. 127.0.0.1 only.
#
#   Benchmarks/bench-rates.sh
#   BASELINE_BIN=/path/to/old/deltasnap RUNS=3 Benchmarks/bench-rates.sh   # old build side by side
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
RECORDS="${RECORDS:-200000}"
RUNS="${RUNS:-3}"
DS_PORT="${DS_PORT:-18095}"
BASELINE_BIN="${BASELINE_BIN:-}"

need curl
build_release
make_workspace bench-rates
"$BIN" generate --count "$RECORDS" --seed 11 >"$TMP/records.ndjson"
"$BIN" import --db "$TMP/served.sqlite" --collection items --quiet "$TMP/records.ndjson" >/dev/null
start_serve "$BIN" "$TMP/served.sqlite" "$DS_PORT"
URL="http://127.0.0.1:$DS_PORT/v1/collections/items"
curl -s -o /dev/null -H 'Accept-Encoding: gzip' "$URL"   # the full body cached, as after the first client

seconds() { local start=$1 end=$2; awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }
SERVERS=("new:$BIN")
[[ -n "$BASELINE_BIN" ]] && SERVERS+=("old:$BASELINE_BIN")
: >"$TMP/rates.tsv"
for run in $(seq 1 "$RUNS"); do
    for server in "${SERVERS[@]}"; do  # alternating, so drift hits both builds alike
        name="${server%%:*}" bin="${server#*:}"
        rm -f "$TMP/import.sqlite"* "$TMP/replica.sqlite"*
        start=$(date +%s%N); "$bin" import --db "$TMP/import.sqlite" --collection items --quiet "$TMP/records.ndjson" >/dev/null; end=$(date +%s%N)
        import_s=$(seconds "$start" "$end")
        start=$(date +%s%N); "$bin" pull --url "$URL" --replica "$TMP/replica.sqlite" >/dev/null; end=$(date +%s%N)
        pull_s=$(seconds "$start" "$end")
        printf '%s\t%s\t%s\t%s\n' "$name" "$run" "$import_s" "$pull_s" >>"$TMP/rates.tsv"
    done
done
echo
echo "$RECORDS records; whole commands, $RUNS runs each, alternating builds"
echo
echo "| build | run | import s | import records/s | first pull s | pull records/s |"
echo "|-------|----:|---------:|-----------------:|-------------:|---------------:|"
awk -F'\t' -v n="$RECORDS" '{ printf "| %-5s | %3s | %8s | %16.0f | %12s | %14.0f |\n", $1, $2, $3, n / $3, $4, n / $4 }' "$TMP/rates.tsv"
