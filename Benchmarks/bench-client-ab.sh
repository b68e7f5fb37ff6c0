#!/usr/bin/env bash
# The client's own steps, old build alternating with the new one in the same sitting, as a user
# starts them (the CLI, whole process, default flags): a first start from the gzip bundle
# (`pull --snapshot`, apply + the first request), a first full pull (sync of a fresh replica),
# and the pull of a 1-record delta. One server (the new build) answers both clients, so only the
# client differs. Prints each step's median time and peak RSS per build, and new/old.
#
#   BASELINE_BIN=/tmp/deltasnap-old Benchmarks/bench-client-ab.sh     # RECORDS=200000 RUNS=5
#
# 127.0.0.1 only; everything started is stopped by PID on exit.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
RECORDS="${RECORDS:-200000}"
RUNS="${RUNS:-5}"
DS_PORT="${DS_PORT:-18099}"
BASELINE_BIN="${BASELINE_BIN:?BASELINE_BIN: the old build to compare with}"
TOKEN=bench-client-ab

need curl
build_release
make_workspace bench-client-ab
say "generating and importing $RECORDS records, baking the gzip bundle"
"$BIN" generate --count "$RECORDS" --seed 7 >"$TMP/records.ndjson"
"$BIN" import --db "$TMP/served.sqlite" --collection items --quiet "$TMP/records.ndjson" >/dev/null
mkdir -p "$TMP/bundle"
"$BIN" bake --db "$TMP/served.sqlite" --collection items --out "$TMP/bundle" >/dev/null
start_serve "$BIN" "$TMP/served.sqlite" "$DS_PORT" --write-token "$TOKEN" --log-level warning
URL="http://127.0.0.1:$DS_PORT/v1/collections/items"

: >"$TMP/results"
for run in $(seq 1 "$RUNS"); do
    # Alternate which build goes first, so neither always meets a warm page cache.
    if (( run % 2 )); then order=("new:$BIN" "old:$BASELINE_BIN"); else order=("old:$BASELINE_BIN" "new:$BIN"); fi
    for build in "${order[@]}"; do
        name="${build%%:*}" bin="${build#*:}"
        rm -f "$TMP/first-start.sqlite"* "$TMP/full.sqlite"*
        echo "$name first-start $(measure_process "$bin" pull --url "$URL" --replica "$TMP/first-start.sqlite" --snapshot "$TMP/bundle/items.snapshot")" >>"$TMP/results"
        echo "$name full-pull $(measure_process "$bin" pull --url "$URL" --replica "$TMP/full.sqlite")" >>"$TMP/results"
        change_one "$URL" "$run$name"
        echo "$name delta-pull $(measure_process "$bin" pull --url "$URL" --replica "$TMP/full.sqlite")" >>"$TMP/results"
    done
    say "run $run of $RUNS done"
done

say "every sample (build step seconds peak-KB):"; sort -k2,2 -k1,1 "$TMP/results" | awk '{ printf "   %s %s %s\n", $1, $2, $3 }' >&2
printf 'step\t%s records\tnew median\told median\tnew/old\tnew peak RSS\told peak RSS\n' "$RECORDS"
for step in first-start full-pull delta-pull; do
    median() { grep "^$1 $step " "$TMP/results" | awk '{ print $3 }' | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
    peak() { grep "^$1 $step " "$TMP/results" | awk '{ if ($4 > m) m = $4 } END { printf "%.0f MB", m / 1024 }'; }
    new="$(median new)" old="$(median old)"
    printf '%s\t\t%.4f s\t%.4f s\t%.2f×\t%s\t%s\n' "$step" "$new" "$old" "$(awk -v a="$new" -v b="$old" 'BEGIN { print (b > 0) ? a / b : 0 }')" "$(peak new)" "$(peak old)"
done
