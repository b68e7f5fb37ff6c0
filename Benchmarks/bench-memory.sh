#!/usr/bin/env bash
# 1M-record memory check (release build, 127.0.0.1 only):
#   - import 1M synthetic records (throughput from `deltasnap import`, peak RSS from /usr/bin/time)
#   - serve them; fetch the full body once with gzip and once identity; re-import 100k changed
#     records and fetch that 100k-record delta; report the server's VmHWM after each step
#   - `deltasnap pull` of the 1M full body into a fresh replica under /usr/bin/time -v
# Everything it starts is stopped by PID on exit.  RECORDS=... CHANGES=... to scale.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
RECORDS="${RECORDS:-1000000}"
CHANGES="${CHANGES:-100000}"
DS_PORT="${DS_PORT:-18082}"

for tool in curl /usr/bin/time; do
    command -v "$tool" >/dev/null || { sudo=""; [[ $(id -u) -ne 0 ]] && sudo=sudo; $sudo apt-get install -y -qq curl time >/dev/null; }
done
build_release
make_workspace bench-memory

maxrss_mb() { awk -F': ' '/Maximum resident set size/ { printf "%.1f", $2 / 1024 }' "$1"; }
elapsed_of() { awk -F': ' '/Elapsed \(wall clock\)/ { print $2 }' "$1"; }
secs() { awk -v t="$1" 'BEGIN { n = split(t, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s }'; }

DB="$TMP/store.sqlite"
say "generating $RECORDS records"
"$BIN" generate --count "$RECORDS" --seed 42 >"$TMP/records.ndjson"
NDJSON_BYTES=$(stat -c %s "$TMP/records.ndjson")
say "importing $RECORDS records"
/usr/bin/time -v -o "$TMP/import.time" "$BIN" import --db "$DB" --collection "$COLLECTION" --quiet "$TMP/records.ndjson" >"$TMP/import.out"
IMPORT_S=$(secs "$(elapsed_of "$TMP/import.time")")
IMPORT_RATE=$(awk -v n="$RECORDS" -v s="$IMPORT_S" 'BEGIN { printf "%.0f", n / s }')
IMPORT_RSS=$(maxrss_mb "$TMP/import.time")
rm -f "$TMP/records.ndjson"

"$BIN" serve --db "$DB" --host 127.0.0.1 --port "$DS_PORT" --log-level warning >"$TMP/serve.out" 2>"$TMP/serve.err" &
DS_PID=$!
PIDS+=("$DS_PID")
for _ in $(seq 1 600); do
    grep -q "deltasnap: serving" "$TMP/serve.out" 2>/dev/null && break
    kill -0 "$DS_PID" 2>/dev/null || { cat "$TMP/serve.err" >&2; exit 1; }
    sleep 0.1
done
URL="http://127.0.0.1:$DS_PORT/v1/collections/$COLLECTION"
HWM_START=$(vmhwm_mb "$DS_PID")

fetch() { # NAME [curl args...] -> prints "status bytes seconds"
    local name="$1"; shift
    curl -s -o "$TMP/$name.bin" -w '%{http_code} %{size_download} %{time_total}' "$@" "$URL"
}
say "full body, gzip"
FULL_GZ=$(fetch full-gz -D "$TMP/full-gz.headers" -H 'Accept-Encoding: gzip')
HWM_GZ=$(vmhwm_mb "$DS_PID")
say "full body, identity"
FULL_ID=$(fetch full-id)
HWM_ID=$(vmhwm_mb "$DS_PID")
rm -f "$TMP/full-id.bin"
OLD_ETAG=$(tr -d '\r' <"$TMP/full-gz.headers" | awk -F': ' 'tolower($1) == "etag" { print $2 }')
rm -f "$TMP/full-gz.bin"

say "re-importing $CHANGES changed records"
"$BIN" generate --count "$CHANGES" --seed 42 --revision 1 >"$TMP/changes.ndjson"
"$BIN" import --db "$DB" --collection "$COLLECTION" --quiet "$TMP/changes.ndjson" >"$TMP/import2.out"
rm -f "$TMP/changes.ndjson"
sleep 0.5
say "large delta ($CHANGES changes), gzip"
DELTA=$(fetch delta -H "If-None-Match: $OLD_ETAG" -H 'Accept-Encoding: gzip')
HWM_DELTA=$(vmhwm_mb "$DS_PID")
rm -f "$TMP/delta.bin"

say "deltasnap pull of the full body into a fresh replica"
/usr/bin/time -v -o "$TMP/pull.time" "$BIN" pull --url "$URL" --replica "$TMP/replica.sqlite" >"$TMP/pull.out" 2>"$TMP/pull.err" || { cat "$TMP/pull.err" >&2; }
PULL_S=$(secs "$(elapsed_of "$TMP/pull.time")")
PULL_RSS=$(maxrss_mb "$TMP/pull.time")
PULL_RATE=$(awk -v n="$RECORDS" -v s="$PULL_S" 'BEGIN { printf "%.0f", n / s }')
HWM_END=$(vmhwm_mb "$DS_PID")

echo
echo "$RECORDS records, NDJSON $NDJSON_BYTES bytes"
echo "| step | result | server VmHWM (MB) |"
echo "|---|---|---:|"
echo "| import $RECORDS (deltasnap import) | ${IMPORT_S} s, ${IMPORT_RATE} records/s, import peak RSS ${IMPORT_RSS} MB | - |"
echo "| server started | - | $HWM_START |"
echo "| full body, gzip (status bytes s) | $FULL_GZ | $HWM_GZ |"
echo "| full body, identity (status bytes s) | $FULL_ID | $HWM_ID |"
echo "| delta of $CHANGES changes, gzip (status bytes s) | $DELTA | $HWM_DELTA |"
echo "| deltasnap pull full body into a fresh replica | ${PULL_S} s, ${PULL_RATE} records/s, client peak RSS ${PULL_RSS} MB | $HWM_END |"
echo "pull output: $(tr '\n' ' ' <"$TMP/pull.out")"
