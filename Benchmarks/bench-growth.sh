#!/usr/bin/env bash
# Growth (issue 44): every step of the pipeline at several sizes, each cell time and peak
# RSS (`/usr/bin/time -f`, whole process), so what grows with the record count shows:
#   import (ids shuffled: the order that used to grow memory), the same records imported
#   --partition-by each of PARTITION_FIELDS (default "rating stock": 50 large partitions,
#   ~10,000 small ones), bake, the first pull (full),
#   a 1-record delta pull — on the replica of each size, and beside it the 10k replica's in
#   the same run — `pull --snapshot` of the gzip bundle into a fresh replica, and serve's
#   peak RSS. Then the same 1-record delta on a replica whose records refer to files (FILES
#   of them, eagerly downloaded). With PG=1, import, first pull and the delta on PostgreSQL
#   too (a throwaway cluster, .ci/postgres-cluster.sh), then an `import --replace` that
#   hides all but 10 records (its tombstones must not be held in memory). 127.0.0.1 only.
#
#   Benchmarks/bench-growth.sh                          # SIZES="10000 1000000 10000000"
#   SIZES="10000 1000000" PG=1 Benchmarks/bench-growth.sh
#   SQLITE=0 PG=1 Benchmarks/bench-growth.sh            # PostgreSQL's rows alone
#   BIN=.build/debug/deltasnap SKIP_BUILD=1 SIZES="1000 5000" Benchmarks/bench-growth.sh   # a quick check
#
# The growth factor of a step is its largest size's cell over its smallest's; per-record time
# is time / records. The 10M run needs ~15 GB of disk under TMPDIR and about an hour.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
SIZES="${SIZES:-10000 1000000 10000000}"
FILES="${FILES:-100}"
PARTITION_FIELDS="${PARTITION_FIELDS:-rating stock}"
PG="${PG:-}"
SQLITE="${SQLITE:-1}"
DS_PORT="${DS_PORT:-18144}"
TOKEN=bench-growth

need curl shuf
[[ -x /usr/bin/time ]] || need time
build_release
make_workspace bench-growth
if [[ -n "$PG" ]]; then
    source "$ROOT/.ci/postgres-cluster.sh"
    start_postgres_cluster "$TMP"
    trap 'stop_postgres_cluster; cleanup' EXIT
fi

# Runs a command; prints "seconds<TAB>peak MB" of the whole process.
measure() {
    measure_process "$@" | awk '{ printf "%.2f s\t%.0f MB", $1, $2 / 1024 }'
}

printf 'step\trecords\tstore\ttime\tpeak RSS\n'
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4"; }

smallest=""
for n in $SIZES; do
    [[ -z "$smallest" ]] && smallest="$n"
    say "$n records: generating (ids shuffled)"
    "$BIN" generate --count "$n" --seed 44 | shuf >"$TMP/records.ndjson"
    if [[ "$SQLITE" == 1 ]]; then
        db="$TMP/store-$n.sqlite"
        row import "$n" sqlite "$(measure "$BIN" import --db "$db" --collection items --quiet "$TMP/records.ndjson")"
        # The same records spread over partitions: by "rating" (50 partitions, each streamed
        # alone at 1M records) and by "stock" (~10,000 partitions, written in runs of many).
        for field in $PARTITION_FIELDS; do
            rm -f "$TMP/partitioned-$n.sqlite"*
            row "import --partition-by $field" "$n" sqlite \
                "$(measure "$BIN" import --db "$TMP/partitioned-$n.sqlite" --collection parts --partition-by "$field" --quiet "$TMP/records.ndjson")"
        done
        rm -f "$TMP/partitioned-$n.sqlite"*
        mkdir -p "$TMP/bake-$n"
        row bake "$n" sqlite "$(measure "$BIN" bake --db "$db" --collection items --out "$TMP/bake-$n")"
        start_serve "$BIN" "$db" "$DS_PORT" --write-token "$TOKEN" --log-level warning
        url="http://127.0.0.1:$DS_PORT/v1/collections/items"
        replica="$TMP/replica-$n.sqlite"
        row "first pull (full)" "$n" sqlite "$(measure "$BIN" pull --url "$url" --replica "$replica")"
        change_one "$url" 1
        row "pull of a 1-record delta" "$n" sqlite "$(measure "$BIN" pull --url "$url" --replica "$replica")"
        rm -f "$TMP/fresh-$n.sqlite"*
        row "pull --snapshot (gzip bundle, fresh replica)" "$n" sqlite \
            "$(measure "$BIN" pull --url "$url" --replica "$TMP/fresh-$n.sqlite" --snapshot "$TMP/bake-$n/items.snapshot")"
        row "serve (peak over the above)" "$n" sqlite "-	$(vmhwm_mb "$DS_PID") MB"
        kill "$DS_PID" && wait "$DS_PID" 2>/dev/null || true
        rm -f "$TMP/fresh-$n.sqlite"* "$TMP/bake-$n/items.snapshot"

        # The smallest replica's delta in the same run, beside this size's.
        if [[ "$n" != "$smallest" ]]; then
            start_serve "$BIN" "$TMP/store-$smallest.sqlite" "$DS_PORT" --write-token "$TOKEN" --log-level warning
            change_one "http://127.0.0.1:$DS_PORT/v1/collections/items" "$n"
            row "pull of a 1-record delta (beside, same run)" "$smallest" sqlite \
                "$(measure "$BIN" pull --url "http://127.0.0.1:$DS_PORT/v1/collections/items" --replica "$TMP/replica-$smallest.sqlite")"
            kill "$DS_PID" && wait "$DS_PID" 2>/dev/null || true
        fi

        # The same records, FILES of them referring to a file: a delta that gives one a new file.
        say "$n records: a replica holding $FILES files"
        mkdir -p "$TMP/files"
        refs=()
        for i in $(seq 1 "$FILES"); do
            head -c $((2000 + i)) /dev/urandom >"$TMP/files/f$i.bin"
        done
        mapfile -t refs < <("$BIN" attachment add --db "$db" --collection items --type application/octet-stream "$TMP"/files/f*.bin)
        for i in "${!refs[@]}"; do printf '{"id":"file-%s","file":%s}\n' "$i" "${refs[$i]}"; done >"$TMP/file-records.ndjson"
        "$BIN" import --db "$db" --collection items --quiet "$TMP/file-records.ndjson" >/dev/null
        rm -rf "$TMP/files"
        start_serve "$BIN" "$db" "$DS_PORT" --write-token "$TOKEN" --log-level warning
        "$BIN" pull --url "$url" --replica "$replica" >/dev/null
        head -c 3000 /dev/urandom >"$TMP/new.bin"
        new_ref="$("$BIN" attachment add --db "$db" --collection items --type application/octet-stream "$TMP/new.bin")"
        before="$(etag_of "$url")"
        printf '{"id":"file-0","file":%s}\n' "$new_ref" | "$BIN" import --db "$db" --collection items --quiet - >/dev/null
        wait_for_change "$url" "$before"
        row "pull of a 1-record delta, $FILES files held" "$n" sqlite "$(measure "$BIN" pull --url "$url" --replica "$replica")"
        kill "$DS_PID" && wait "$DS_PID" 2>/dev/null || true
        if [[ "$n" != "$smallest" ]]; then rm -rf "$replica"* "$db"*; fi
    fi

    if [[ -n "$PG" ]]; then
        pg_db="$PG_URL"
        row import "$n" postgres "$(measure "$BIN" import --db "$pg_db" --collection "items$n" --quiet "$TMP/records.ndjson")"
        start_serve "$BIN" "$pg_db" "$DS_PORT" --write-token "$TOKEN" --log-level warning
        url="http://127.0.0.1:$DS_PORT/v1/collections/items$n"
        row "first pull (full)" "$n" postgres "$(measure "$BIN" pull --url "$url" --replica "$TMP/pg-replica-$n.sqlite")"
        change_one "$url" 1
        row "pull of a 1-record delta" "$n" postgres "$(measure "$BIN" pull --url "$url" --replica "$TMP/pg-replica-$n.sqlite")"
        row "serve (peak over the above)" "$n" postgres "-	$(vmhwm_mb "$DS_PID") MB"
        kill "$DS_PID" && wait "$DS_PID" 2>/dev/null || true
        rm -f "$TMP/pg-replica-$n.sqlite"*
        # A replace that mentions 10 records hides all the others: n - 10 tombstones written.
        head -n 10 "$TMP/records.ndjson" >"$TMP/ten.ndjson"
        row "import --replace hiding all but 10" "$n" postgres \
            "$(measure "$BIN" import --db "$pg_db" --collection "items$n" --replace --quiet "$TMP/ten.ndjson")"
    fi
    rm -f "$TMP/records.ndjson"
done
