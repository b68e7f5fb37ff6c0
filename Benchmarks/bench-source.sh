#!/usr/bin/env bash
# `deltasnap follow` as an operator starts it, against a throwaway PostgreSQL source on
# 127.0.0.1 (wal_level=logical), beside PostgreSQL's own rate for the same writes in the
# same sitting (the VM's speed moves 2x from day to day: the ratio is the figure).
#
#   Benchmarks/bench-source.sh                         # 1,000,000-row copy, 20,000 transactions, 100 latency samples
#   ROWS=200000 TXNS=5000 SAMPLES=30 Benchmarks/bench-source.sh     # quicker
#   DEST=postgres Benchmarks/bench-source.sh           # into DeltaSnap's PostgreSQL store (same server, its own database)
#   DEST=postgres-same Benchmarks/bench-source.sh      # … in the source database itself
#
# Cases (the issue's targets in brackets):
#   copy      the first run's copy of a ROWS-row table, rows/s                 [>= 100,000]
#   stream    TXNS mixed transactions (1-row and 10-row updates, 5-row inserts,
#             deletes) from the first commit to the last one published, row changes/s,
#             beside psql applying the same writes to a table nobody follows     [>= 20,000]
#   large     one source transaction updating BIG_TXN rows of the copied table (default
#             all of them): commit to published, rows/s, beside psql's own time for the
#             UPDATE; the follower's peak memory during it (staged in a file, not held)
#   latency   a source commit -> a `sync --watch --live` client printed it,
#             through `serve` on the store: p50 / p99                           [< 100 / < 250 ms]
# Everything started here is stopped by PID on exit.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
source "$ROOT/.ci/postgres-cluster.sh"
ROWS="${ROWS:-1000000}"
TXNS="${TXNS:-20000}"
SAMPLES="${SAMPLES:-100}"
BIG_TXN="${BIG_TXN:-$ROWS}"
DEST="${DEST:-sqlite}"
DS_PORT="${DS_PORT:-18095}"

need psql python3 curl
build_release
make_workspace bench-source
trap 'stop_postgres_cluster; cleanup' EXIT
start_postgres_cluster "$TMP" -c wal_level=logical -c fsync=off -c max_wal_size=4GB
SRC="$PG_URL"
# DEST=postgres: DeltaSnap's PostgreSQL store in a database of its own on the source's server
# (DEST=postgres-same: in the source database itself).
case "$DEST" in
    postgres) psql -qX "$PG_URL" -c "CREATE DATABASE deltasnap"; DB="${PG_URL%/*}/deltasnap" ;;
    postgres-same) DB="$PG_URL" ;;
    *) DB="$TMP/store.sqlite" ;;
esac
P=(psql -q -X -v ON_ERROR_STOP=1 "$SRC")
now() { date +%s.%N; }

"${P[@]}" -c "CREATE TABLE big(id int PRIMARY KEY, v int NOT NULL, note text, at timestamptz)" \
    -c "INSERT INTO big SELECT i, i, 'row ' || i, now() FROM generate_series(1, $ROWS) AS i" \
    -c "CREATE TABLE items(id int PRIMARY KEY, v int NOT NULL, note text)" -c "CREATE TABLE items_alone(LIKE items INCLUDING ALL)" \
    -c "INSERT INTO items SELECT i, i, 'n' FROM generate_series(1, 100000) AS i" -c "INSERT INTO items_alone SELECT * FROM items" \
    -c "CREATE TABLE marker(id int PRIMARY KEY, n int)" -c "INSERT INTO marker VALUES (1, 0)" \
    -c "CREATE TABLE pings(id int PRIMARY KEY, at_us bigint)" -c "INSERT INTO pings VALUES (-1, 0)"

say "copy: $ROWS rows"
# As an operator starts it: default logging (a line per published batch on stdout).
FOLLOW=("$BIN" follow --source "$SRC" --db "$DB" --table big --table items --table marker --table pings --create)
"${FOLLOW[@]}" >"$TMP/follow.out" 2>"$TMP/follow.err" &
FOLLOW_PID=$!
PIDS+=("$FOLLOW_PID")
for _ in $(seq 1 6000); do grep -q "^copy: .* rows/s" "$TMP/follow.out" && break; kill -0 "$FOLLOW_PID" || { cat "$TMP/follow.err"; exit 1; }; sleep 0.1; done
COPY_LINE=$(grep "^copy: .* rows/s" "$TMP/follow.out")
COPY_RATE=$(sed -E 's/.*, ([0-9]+) rows\/s\]/\1/' <<<"$COPY_LINE")
# The reference in the same sitting: psql reading the same rows as text (what the copy reads).
started=$(now); "${P[@]}" -c "\\copy (SELECT id::text, v::text, note, at::text FROM big) TO '/dev/null'" >/dev/null; ended=$(now)
PSQL_COPY_RATE=$(awk -v n="$ROWS" -v s="$started" -v e="$ended" 'BEGIN { printf "%d", n / (e - s) }')

say "stream: $TXNS mixed transactions"
python3 - "$TXNS" "$TMP/load.sql" "$TMP/load-alone.sql" "$TMP/changes" <<'PY'
import random, sys
count, follow_path, alone_path, changes_path = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
random.seed(42)
lines, changes, next_id = [], 0, 100001
for t in range(count):
    kind = t % 8
    i = random.randint(1, 99990)
    if kind < 4:
        body, n = f"UPDATE items SET v = v + 1 WHERE id = {i};", 1
    elif kind < 6:
        body, n = f"UPDATE items SET v = v + 1, note = 'u{t}' WHERE id BETWEEN {i} AND {i + 9};", 10
    elif kind == 6:
        body = "INSERT INTO items VALUES " + ",".join(f"({next_id + k}, {t}, 'new')" for k in range(5)) + ";"
        n, next_id = 5, next_id + 5
    else:
        body, n = f"DELETE FROM items WHERE id = {i};", 1
    lines.append(("BEGIN;" + body + "COMMIT;") if n > 1 else body)
    changes += n
with open(follow_path, "w") as out:
    out.write("\n".join(lines) + "\nUPDATE marker SET n = n + 1;\n")
with open(alone_path, "w") as out:
    out.write("\n".join(lines).replace("items", "items_alone") + "\n")
open(changes_path, "w").write(str(changes))
PY
CHANGES=$(cat "$TMP/changes")
# PostgreSQL alone: the same writes to a table no publication names.
started=$(now); "${P[@]}" -f "$TMP/load-alone.sql" >/dev/null; ended=$(now)
ALONE_RATE=$(awk -v n="$CHANGES" -v s="$started" -v e="$ended" 'BEGIN { printf "%d", n / (e - s) }')
# Followed: from the first commit until the marker (committed last) is published.
started=$(now); "${P[@]}" -f "$TMP/load.sql" >/dev/null; loaded=$(now)
for _ in $(seq 1 12000); do grep -q "^marker: version 2" "$TMP/follow.out" && break; kill -0 "$FOLLOW_PID" || { cat "$TMP/follow.err"; exit 1; }; sleep 0.01; done
published=$(now)
PG_RATE=$(awk -v n="$CHANGES" -v s="$started" -v e="$loaded" 'BEGIN { printf "%d", n / (e - s) }')
FOLLOW_RATE=$(awk -v n="$CHANGES" -v s="$started" -v e="$published" 'BEGIN { printf "%d", n / (e - s) }')
CATCH_UP=$(awk -v l="$loaded" -v p="$published" 'BEGIN { printf "%.2f", p - l }')

say "latency: $SAMPLES commits -> a live client"
start_serve "$BIN" "$DB" "$DS_PORT"   # as a user starts it: a request line per answer
python3 - "$BIN" "http://127.0.0.1:$DS_PORT/v1/collections/pings" "$TMP/replica.sqlite" "$SRC" "$SAMPLES" >"$TMP/latency" <<'PY'
import subprocess, sys, threading, time, queue
binary, url, replica, source, samples = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
client = subprocess.Popen([binary, "sync", "--url", url, "--replica", replica, "--watch", "--live", "--wait", "20"],
                          stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
lines = queue.Queue()
def read():
    for line in client.stdout:
        lines.put((time.time(), line))
threading.Thread(target=read, daemon=True).start()
lines.get(timeout=30)  # the first full pull (the table is empty: a full body)
psql = subprocess.Popen(["psql", "-q", "-X", source], stdin=subprocess.PIPE, text=True)
latencies = []
try:
    for index in range(samples):
        time.sleep(0.25)
        psql.stdin.write(f"INSERT INTO pings VALUES ({index}, (extract(epoch from clock_timestamp()) * 1e6)::bigint);\n")
        psql.stdin.flush()
        arrived, line = lines.get(timeout=10)
        out = subprocess.run(["psql", "-qAtX", source, "-c", f"SELECT at_us FROM pings WHERE id = {index}"], capture_output=True, text=True)
        latencies.append((arrived - int(out.stdout.strip()) / 1e6) * 1000)
finally:
    psql.stdin.close(); psql.wait(); client.kill(); client.wait()
latencies.sort()
pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]
print(f"{pick(0.5):.1f} {pick(0.99):.1f} {latencies[-1]:.1f}")
print(" ".join(f"{value:.0f}" for value in latencies), file=sys.stderr)
PY
read -r P50 P99 PMAX <"$TMP/latency"

# After the latency case: its store writes (a checkpoint of a million rows' WAL) do not
# land in a latency sample.
say "large: one transaction of $BIG_TXN rows"
rss() { awk -v key="$1:" '$1 == key { print int($2 / 1024) }' "/proc/$FOLLOW_PID/status"; }
# The peak so far (the copy's) is reset: VmHWM then measures this transaction alone.
echo 5 >"/proc/$FOLLOW_PID/clear_refs"
RSS_BEFORE=$(rss VmRSS)
started=$(now); "${P[@]}" -c "UPDATE big SET v = v + 1 WHERE id <= $BIG_TXN" >/dev/null; loaded=$(now)
for _ in $(seq 1 60000); do grep -q "^big: version 2" "$TMP/follow.out" && break; kill -0 "$FOLLOW_PID" || { cat "$TMP/follow.err"; exit 1; }; sleep 0.01; done
published=$(now)
BIG_PEAK=$(rss VmHWM)
# Where the time went: the follower logs when the transaction's rows began to arrive (the
# source decodes a transaction whole before the first of its rows is sent).
STAGED_AT=$(grep "staged in a temporary file until its commit" "$TMP/follow.err" | tail -1 | cut -d' ' -f1)
FIRST_ROW=$(python3 -c "import datetime,sys; t=datetime.datetime.fromisoformat(sys.argv[1].replace('Z','+00:00')); print(f'{t.timestamp() - float(sys.argv[2]):.1f}')" "$STAGED_AT" "$loaded" 2>/dev/null || echo "?")
BIG_RATE=$(awk -v n="$BIG_TXN" -v s="$loaded" -v e="$published" 'BEGIN { printf "%d", n / (e - s) }')
BIG_PG_RATE=$(awk -v n="$BIG_TXN" -v s="$started" -v e="$loaded" 'BEGIN { printf "%d", n / (e - s) }')
BIG_BYTES=$("${P[@]}" -qAt -c "SELECT pg_size_pretty(sum(pg_column_size(b.*))) FROM big b WHERE id <= $BIG_TXN")


echo
echo "deltasnap follow: source PostgreSQL $(psql -qAtX "$SRC" -c 'SHOW server_version') (fsync off), destination $DEST, $(nproc) cores"
echo
echo "| case | deltasnap follow | PostgreSQL alone | target |"
echo "|---|---:|---:|---|"
echo "| copy of $ROWS rows (rows/s) | $COPY_RATE | psql \\copy of the same rows: $PSQL_COPY_RATE | >= 100,000 |"
echo "| $TXNS mixed transactions, $CHANGES row changes (changes/s, commit to published) | $FOLLOW_RATE | $ALONE_RATE | >= 20,000 |"
echo "| … psql's own rate while followed; caught up after the last commit | $PG_RATE; ${CATCH_UP} s | | |"
echo "| one transaction of $BIG_TXN rows ($BIG_BYTES of rows): rows/s from its commit to published | $BIG_RATE | psql's UPDATE: $BIG_PG_RATE rows/s | streamed |"
echo "| … of which the source's decoding until its first row arrived (s) | $FIRST_ROW | | |"
echo "| … the follower's memory: before / peak while publishing it (MiB) | $RSS_BEFORE / $BIG_PEAK | | not in proportion to the rows |"
echo "| source commit -> live client (ms): p50 / p99 / max | $P50 / $P99 / $PMAX | - (absolute target) | < 100 / < 250 |"
