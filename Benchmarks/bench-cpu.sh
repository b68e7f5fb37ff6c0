#!/usr/bin/env bash
# Server CPU per answered request (utime + stime of the serve process over a wrk run ÷
# requests): steadier than req/s on a VM whose speed moves from run to run. 304s and a cached
# 12-change delta, with serve silent (--log-level warning) and as a user starts it (a request
# line per answer at info), alternating builds and rounds. 127.0.0.1 only.
#
#   Benchmarks/bench-cpu.sh
#   BASELINE_BIN=/path/to/old/deltasnap ROUNDS=3 Benchmarks/bench-cpu.sh
# With BASELINE_BIN the store is made by the baseline (FIXTURE_BIN) and each build serves its
# own copy: a newer build migrates the store it opens, which an older one then refuses.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
RECORDS="${RECORDS:-34000}"
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-5s}"
DS_PORT="${DS_PORT:-18121}"
BASELINE_BIN="${BASELINE_BIN:-}"
FIXTURE_BIN="${FIXTURE_BIN:-${BASELINE_BIN:-$BIN}}"

need wrk curl
build_release
make_workspace bench-cpu
"$FIXTURE_BIN" generate --count "$RECORDS" --seed 42 >"$TMP/records.ndjson"
"$FIXTURE_BIN" import --db "$TMP/s.sqlite" --collection items --quiet "$TMP/records.ndjson" >/dev/null
URL="http://127.0.0.1:$DS_PORT/v1/collections/items"

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

start_serve "$FIXTURE_BIN" "$TMP/s.sqlite" "$DS_PORT" --log-level warning
OLD_TAG="$(etag_of "$URL")"
kill "$DS_PID"; wait "$DS_PID" 2>/dev/null || true
"$FIXTURE_BIN" generate --count 12 --seed 42 --revision 1 | "$FIXTURE_BIN" import --db "$TMP/s.sqlite" --collection items --quiet - >/dev/null
for name in new old; do copy_store "$TMP/s.sqlite" "$TMP/s-$name.sqlite"; done

SERVERS=("new:$BIN")
[[ -n "$BASELINE_BIN" ]] && SERVERS+=("old:$BASELINE_BIN")
TICK_US=$((1000000 / $(getconf CLK_TCK)))
: >"$TMP/cpu.tsv"
for round in $(seq 1 "$ROUNDS"); do
    for server in "${SERVERS[@]}"; do
        name="${server%%:*}" bin="${server#*:}"
        for mode in silent logged; do
            if [[ "$mode" == silent ]]; then start_serve "$bin" "$TMP/s-$name.sqlite" "$DS_PORT" --log-level warning; else start_serve "$bin" "$TMP/s-$name.sqlite" "$DS_PORT"; fi
            tag="$(etag_of "$URL")"
            curl -s -o /dev/null -H "If-None-Match: $OLD_TAG" -H 'Accept-Encoding: gzip' "$URL"
            wrk -t2 -c32 -d2s -H "If-None-Match: $tag" "$URL" >/dev/null 2>&1 || true
            for case in 304 delta12; do
                header="If-None-Match: $tag"; [[ "$case" == delta12 ]] && header="If-None-Match: $OLD_TAG"
                before=$(cpu_ticks "$DS_PID")
                read -r requests rps < <(wrk -t2 -c32 -d"$DURATION" -H "$header" -H 'Accept-Encoding: gzip' "$URL" |
                    awk '/requests in/ { n = $1 } /^Requests\/sec/ { r = $2 } END { print n, r }')
                after=$(cpu_ticks "$DS_PID")
                printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$mode" "$case" "$round" "$rps" \
                    "$(awk -v t=$((after - before)) -v us="$TICK_US" -v n="$requests" 'BEGIN { printf "%.2f", t * us / n }')" >>"$TMP/cpu.tsv"
            done
            kill "$DS_PID"; wait "$DS_PID" 2>/dev/null || true
        done
    done
done
echo
echo "server CPU µs per request (median of $ROUNDS rounds; req/s median beside it), wrk -t2 -c32 -d$DURATION, $RECORDS records"
echo
echo "| build | case    | silent µs/req | logged µs/req | logged cost | silent req/s | logged req/s |"
echo "|-------|---------|--------------:|--------------:|------------:|-------------:|-------------:|"
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for server in "${SERVERS[@]}"; do
    name="${server%%:*}"
    for case in 304 delta12; do
        s=$(awk -F'\t' -v n="$name" -v c="$case" '$1 == n && $2 == "silent" && $3 == c { print $6 }' "$TMP/cpu.tsv" | median)
        l=$(awk -F'\t' -v n="$name" -v c="$case" '$1 == n && $2 == "logged" && $3 == c { print $6 }' "$TMP/cpu.tsv" | median)
        sr=$(awk -F'\t' -v n="$name" -v c="$case" '$1 == n && $2 == "silent" && $3 == c { print $5 }' "$TMP/cpu.tsv" | median)
        lr=$(awk -F'\t' -v n="$name" -v c="$case" '$1 == n && $2 == "logged" && $3 == c { print $5 }' "$TMP/cpu.tsv" | median)
        printf '| %-5s | %-7s | %13s | %13s | %10s%% | %12.0f | %12.0f |\n' "$name" "$case" "$s" "$l" \
            "$(awk -v s="$s" -v l="$l" 'BEGIN { printf "%+.0f", (l / s - 1) * 100 }')" "$sr" "$lr"
    done
done
