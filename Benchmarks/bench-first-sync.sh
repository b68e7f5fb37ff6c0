#!/usr/bin/env bash
# The first sync of an app that ships a bundled .replica (issue 21, item 7), timed as a user
# starts it (`deltasnap pull --snapshot BUNDLE`, whole process): the first attempt answered
# 304, against a dead server, and the first 1-record delta; whether the bundle was copied.
# For reference, the copy the old client made on the first attempt (cp + fsync of the
# bundle), measured in the same sitting. 127.0.0.1 only.
#
#   Benchmarks/bench-first-sync.sh                 # RECORDS=1000000 RUNS=3
#   BASELINE_BIN=/path/to/old/deltasnap Benchmarks/bench-first-sync.sh   # the old client side by side
#
# The server runs with --log-level warning (it is the reference point, not what is timed);
# every timed command is the CLI with default flags.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
RECORDS="${RECORDS:-1000000}"
RUNS="${RUNS:-3}"
DS_PORT="${DS_PORT:-18097}"
BASELINE_BIN="${BASELINE_BIN:-}"
TOKEN=bench-first-sync

need curl
build_release
make_workspace bench-first-sync
say "generating and importing $RECORDS records, baking the bundle"
"$BIN" generate --count "$RECORDS" --seed 5 >"$TMP/records.ndjson"
"$BIN" import --db "$TMP/served.sqlite" --collection items --quiet "$TMP/records.ndjson" >/dev/null
mkdir -p "$TMP/bundle"
"$BIN" bake --db "$TMP/served.sqlite" --collection items --out "$TMP/bundle" --replica >/dev/null
BUNDLE="$TMP/bundle/items.replica"
start_serve "$BIN" "$TMP/served.sqlite" "$DS_PORT" --write-token "$TOKEN" --log-level warning
URL="http://127.0.0.1:$DS_PORT/v1/collections/items"

ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 1e6 }'; }
timed() { local start end; start=$(date +%s%N); "$@" >/dev/null 2>&1 || true; end=$(date +%s%N); ms "$start" "$end"; }
exists() { [[ -e "$1" ]] && echo yes || echo no; }

printf 'bundle\t%s records\t%s MB\n' "$RECORDS" "$(du -m "$BUNDLE" | cut -f1)"
BUILDS=("new:$BIN")
[[ -n "$BASELINE_BIN" ]] && BUILDS+=("old:$BASELINE_BIN")
printf 'run\tbuild\tcase\tms\treplica copied\n'
# The server still holds the bundle's state: first attempts answered 304. Builds alternate
# within each run, so the VM's drift hits both alike.
for run in $(seq 1 "$RUNS"); do
    for build in "${BUILDS[@]}"; do
        name="${build%%:*}" bin="${build#*:}" R="$TMP/app-${build%%:*}-$run.sqlite"
        printf '%s\t%s\tfirst attempt, dead server\t%s\t%s\n' "$run" "$name" \
            "$(timed "$bin" pull --url "http://127.0.0.1:9/v1/collections/items" --replica "$R" --snapshot "$BUNDLE" --timeout 2)" "$(exists "$R")"
        rm -f "$R"*
        printf '%s\t%s\tfirst attempt, 304\t%s\t%s\n' "$run" "$name" "$(timed "$bin" pull --url "$URL" --replica "$R" --snapshot "$BUNDLE")" "$(exists "$R")"
        printf '%s\t%s\tsecond attempt, 304\t%s\t%s\n' "$run" "$name" "$(timed "$bin" pull --url "$URL" --replica "$R" --snapshot "$BUNDLE")" "$(exists "$R")"
        rm -f "$R"*
    done
done
# Then one record changes per run: a fresh app's first sync is a small delta on the bundle.
for run in $(seq 1 "$RUNS"); do
    curl -s -o /dev/null -X PUT -H "Authorization: Bearer $TOKEN" -d "{\"run\":$run}" "$URL/records/first-sync-$run"
    sleep 0.3
    for build in "${BUILDS[@]}"; do
        name="${build%%:*}" bin="${build#*:}" R="$TMP/app-delta-${build%%:*}-$run.sqlite"
        printf '%s\t%s\tfirst sync, a %s-record delta\t%s\t%s\n' "$run" "$name" "$run" "$(timed "$bin" pull --url "$URL" --replica "$R" --snapshot "$BUNDLE")" "$(exists "$R")"
        printf '%s\t%s\tthe sync after it (304)\t%s\t%s\n' "$run" "$name" "$(timed "$bin" pull --url "$URL" --replica "$R")" "$(exists "$R")"
        rm -f "$R"*
    done
    start=$(date +%s%N); cp "$BUNDLE" "$TMP/copy.sqlite"; sync "$TMP/copy.sqlite"; end=$(date +%s%N)
    printf '%s\t-\treference: cp + fsync of the bundle\t%s\t-\n' "$run" "$(ms "$start" "$end")"
    rm -f "$TMP/copy.sqlite"
done
