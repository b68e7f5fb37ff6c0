#!/usr/bin/env bash
# Attachments as users move them: `deltasnap serve` beside nginx serving the same files, on
# 127.0.0.1 only, in one sitting (the ratios are the figures; the VM's speed moves 2x).
#
#   Benchmarks/bench-attachments.sh                    # 100 MiB blob, 10,000 x 20 KiB, 1 GiB RSS check
#   BIG_MB=1024 Benchmarks/bench-attachments.sh        # the 1 GiB RSS check is always 1 GiB; BIG_MB sizes the speed case
#   SMALL=2000 DURATION=5s RSS_GB=0 Benchmarks/bench-attachments.sh   # quicker
#   BIN=/tmp/deltasnap-old Benchmarks/bench-attachments.sh
#   SERVE_LOG=info Benchmarks/bench-attachments.sh     # serve as a user starts it: a request line per answer (nginx keeps access_log off)
#
# Cases (the issue's targets in brackets):
#   download  GET of a BIG_MB blob with curl, REPEAT times each, median MB/s   [>= 0.9x nginx]
#   small     wrk over SMALL blobs of 20 KiB, each URL in turn                 [>= 0.8x nginx req/s]
#             (also beside nginx with open_file_cache, as deltasnap keeps small blobs' descriptors)
#   upload    PUT of the BIG_MB blob (whole; and resumable in 8 MiB parts)     [>= 100 MiB/s]
#   rss       server RSS growth over a 1 GiB upload then download             [< 50 MiB]
# nginx serves the same files (hard links of the store's blobs) with sendfile, one worker per
# core; deltasnap one event loop per core. Everything started here is stopped by PID on exit.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
BIG_MB="${BIG_MB:-100}"
SMALL="${SMALL:-10000}"
REPEAT="${REPEAT:-9}"
DURATION="${DURATION:-10s}"
THREADS="${THREADS:-2}"
CONNECTIONS="${CONNECTIONS:-32}"
RSS_GB="${RSS_GB:-1}"
NGINX_WORKERS="${NGINX_WORKERS:-auto}"
DS_PORT="${DS_PORT:-18090}"
NGINX_PORT="${NGINX_PORT:-18091}"
NGINX_CACHED_PORT="${NGINX_CACHED_PORT:-18092}"
TOKEN=bench-token

need nginx wrk curl
build_release
make_workspace bench-attachments
RESULTS="$TMP/results.tsv"
: >"$RESULTS"

DB="$TMP/store.sqlite"
mkdir -p "$TMP/files/small" "$TMP/www/v1/collections/$COLLECTION/attachments"

say "making a $BIG_MB MiB blob and $SMALL blobs of 20 KiB"
head -c "$((BIG_MB << 20))" /dev/urandom >"$TMP/files/big.bin"
python3 - "$TMP/files/small" "$SMALL" <<'PY'
import os, sys
directory, count = sys.argv[1], int(sys.argv[2])
for index in range(count):
    with open(os.path.join(directory, f"{index:05d}.bin"), "wb") as out:
        out.write(os.urandom(20 * 1024))
PY
say "storing them (deltasnap attachment add) and one record per blob"
"$BIN" attachment add --db "$DB" --collection "$COLLECTION" "$TMP/files/big.bin" >"$TMP/big.ref"
find "$TMP/files/small" -name '*.bin' | sort | xargs "$BIN" attachment add --db "$DB" --collection "$COLLECTION" >"$TMP/small.refs"
python3 - "$TMP/big.ref" "$TMP/small.refs" "$TMP/records.ndjson" <<'PY'
import json, sys
big = json.loads(open(sys.argv[1]).read())
small = [json.loads(line) for line in open(sys.argv[2])]
with open(sys.argv[3], "w") as out:
    out.write(json.dumps({"id": "big", "file": big}) + "\n")
    for index, reference in enumerate(small):
        out.write(json.dumps({"id": f"s{index:05d}", "file": reference}) + "\n")
PY
"$BIN" import --db "$DB" --collection "$COLLECTION" --quiet "$TMP/records.ndjson" >&2
BIG_HASH=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["$attachment"])' "$TMP/big.ref")
# nginx serves the very same files, at the same paths.
for blob in "$DB".attachments/??/*; do ln "$blob" "$TMP/www/v1/collections/$COLLECTION/attachments/$(basename "$blob")"; done
awk -F'"' '{ print "/v1/collections/'"$COLLECTION"'/attachments/" $4 }' "$TMP/small.refs" >"$TMP/small.paths"
cat >"$TMP/paths.lua" <<LUA
local paths = {}
for line in io.lines("$TMP/small.paths") do paths[#paths + 1] = line end
local counter = 0
request = function()
    counter = counter + 1
    return wrk.format("GET", paths[(counter % #paths) + 1])
end
LUA

start_nginx_with "http://127.0.0.1:$NGINX_PORT/" <<NGINX
    sendfile on;
    tcp_nopush on;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        root $TMP/www;
        location / { default_type application/octet-stream; }
    }
    # The second reference: nginx keeping descriptors open as deltasnap keeps small blobs'
    # (open_file_cache is off in nginx's default configuration).
    server {
        listen 127.0.0.1:$NGINX_CACHED_PORT;
        root $TMP/www;
        open_file_cache max=16384 inactive=60s;
        open_file_cache_valid 60s;
        location / { default_type application/octet-stream; }
    }
NGINX
start_serve "$BIN" "$DB" "$DS_PORT" --write-token "$TOKEN" --log-level "${SERVE_LOG:-warning}" --max-attachment-bytes $((4 << 30))
NG="http://127.0.0.1:$NGINX_PORT/v1/collections/$COLLECTION/attachments"
DS="http://127.0.0.1:$DS_PORT/v1/collections/$COLLECTION/attachments"

# Median of REPEAT transfers, in MB/s (10^6 bytes), of `curl ARGS…`.
median_rate() {
    local rates=()
    for _ in $(seq 1 "$REPEAT"); do
        rates+=("$(curl -s -o /dev/null -w '%{speed_download} %{speed_upload}' "$@" | awk '{ s = $1 > $2 ? $1 : $2; printf "%.1f", s / 1e6 }')")
    done
    printf '%s\n' "${rates[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

say "download: $BIG_MB MiB, $REPEAT times each, alternating"
# One unmeasured download each first: deltasnap's first answer of a blob goes through the
# router (and remembers the reference); the page cache is warm for both.
curl -s -o /dev/null "$NG/$BIG_HASH"; curl -s -o /dev/null "$DS/$BIG_HASH"
ng_rates=(); ds_rates=()
for _ in $(seq 1 "$REPEAT"); do
    ng_rates+=("$(curl -s -o /dev/null -w '%{speed_download}' "$NG/$BIG_HASH" | awk '{ printf "%.1f", $1 / 1e6 }')")
    ds_rates+=("$(curl -s -o /dev/null -w '%{speed_download}' "$DS/$BIG_HASH" | awk '{ printf "%.1f", $1 / 1e6 }')")
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo -e "download-nginx\t$(median "${ng_rates[@]}")" >>"$RESULTS"
echo -e "download-deltasnap\t$(median "${ds_rates[@]}")" >>"$RESULTS"

say "small: wrk over $SMALL blobs of 20 KiB"
# Server CPU per request (utime + stime ÷ requests): steadier than req/s on this VM.
cpu_ticks() { local total=0 pid; for pid in "$@"; do total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat"))); done; echo "$total"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
# deltasnap's first answer of each blob goes through the router (it remembers the reference
# there): one pass over them all first, for both servers alike.
side_url() {
    case "$1" in
        nginx) echo "http://127.0.0.1:$NGINX_PORT" ;;
        nginx-ofc) echo "http://127.0.0.1:$NGINX_CACHED_PORT" ;;
        deltasnap) echo "http://127.0.0.1:$DS_PORT" ;;
    esac
}
for side in nginx nginx-ofc deltasnap; do
    url=$(side_url "$side")
    wrk -t1 -c8 -d"$(( (SMALL + 9999) / 10000 * 2 ))s" -s "$TMP/paths.lua" "$url" >/dev/null
done
for side in nginx nginx-ofc deltasnap; do
    url=$(side_url "$side")
    pids=$([[ $side == deltasnap ]] && echo "$DS_PID" || pgrep -P "$NGINX_PID" | tr '\n' ' ')
    before=$(cpu_ticks $pids)
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s "$TMP/paths.lua" "$url" >"$TMP/wrk-$side.txt"
    after=$(cpu_ticks $pids)
    requests=$(awk '/requests in/ { print $1 }' "$TMP/wrk-$side.txt")
    echo -e "small-$side\t$(awk '/Requests\/sec/ { print $2 }' "$TMP/wrk-$side.txt")\t$(awk '/Non-2xx/ { print $NF }' "$TMP/wrk-$side.txt")\t$(awk -v t="$((after - before))" -v u="$TICK_US" -v n="$requests" 'BEGIN { printf "%.1f", t * u / n }')" >>"$RESULTS"
done

say "upload: $BIG_MB MiB whole (PUT), $REPEAT times"
UP_HASH=$(sha256sum "$TMP/files/big.bin" | cut -c1-64)
echo -e "upload-whole\t$(median_rate -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/octet-stream" -T "$TMP/files/big.bin" "$DS/$UP_HASH")" >>"$RESULTS"
# Resumable, as the client sends it: create, then 8 MiB parts.
resumable_upload() {
    local file="$1" hash="$2" size location offset part=$((8 << 20)) started ended
    size=$(stat -c %s "$file")
    started=$(date +%s.%N)
    location=$(curl -s -D - -o /dev/null -X POST -H "Authorization: Bearer $TOKEN" -H 'Upload-Draft-Interop-Version: 9' \
        -H 'Upload-Complete: ?0' -H "Upload-Length: $size" --data-binary '' "$DS/$hash" | tr -d '\r' | awk -F': ' 'tolower($1) == "location" { print $2 }')
    offset=0
    while ((offset < size)); do
        local count=$((size - offset < part ? size - offset : part)) complete='?0'
        ((offset + count == size)) && complete='?1'
        tail -c +"$((offset + 1))" "$file" | head -c "$count" | curl -s -o /dev/null -X PATCH -H "Authorization: Bearer $TOKEN" \
            -H 'Upload-Draft-Interop-Version: 9' -H "Upload-Offset: $offset" -H "Upload-Complete: $complete" \
            -H 'Content-Type: application/partial-upload' --data-binary @- "http://127.0.0.1:$DS_PORT$location"
        offset=$((offset + count))
    done
    ended=$(date +%s.%N)
    awk -v b="$size" -v s="$started" -v e="$ended" 'BEGIN { printf "%.1f", b / (e - s) / 1e6 }'
}
echo -e "upload-resumable\t$(resumable_upload "$TMP/files/big.bin" "$UP_HASH")" >>"$RESULTS"

if ((RSS_GB > 0)); then
    say "rss: a $RSS_GB GiB upload, then its download"
    head -c "$((RSS_GB << 30))" /dev/urandom >"$TMP/files/huge.bin"
    HUGE_HASH=$(sha256sum "$TMP/files/huge.bin" | cut -c1-64)
    before=$(vmrss_mb "$DS_PID")
    curl -s -o /dev/null -H "Authorization: Bearer $TOKEN" -T "$TMP/files/huge.bin" "$DS/$HUGE_HASH"
    after_up=$(vmrss_mb "$DS_PID")
    printf '{"id":"huge","file":{"$attachment":"%s","size":%s,"type":"application/octet-stream"}}\n' "$HUGE_HASH" "$((RSS_GB << 30))" \
        | curl -s -o /dev/null -X POST -H "Authorization: Bearer $TOKEN" --data-binary @- "http://127.0.0.1:$DS_PORT/v1/collections/$COLLECTION/records"
    curl -s -o /dev/null "$DS/$HUGE_HASH"
    after_down=$(vmrss_mb "$DS_PID")
    echo -e "rss\t$before\t$after_up\t$after_down\t$(vmhwm_mb "$DS_PID")" >>"$RESULTS"
fi

# ---------------------------------------------------------------- report
get() { awk -F'\t' -v n="$1" -v c="$2" '$1 == n { print $c }' "$RESULTS"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
echo
echo "attachments: $BIG_MB MiB blob (curl, median of $REPEAT); $SMALL x 20 KiB (wrk -t$THREADS -c$CONNECTIONS -d$DURATION); nginx worker_processes $NGINX_WORKERS, sendfile"
echo
echo "| case                    | nginx      | deltasnap  | ×nginx | target |"
echo "|-------------------------|-----------:|-----------:|-------:|--------|"
printf '| download %4s MiB (MB/s) | %10s | %10s | %6s | ≥ 0.9  |\n' "$BIG_MB" "$(get download-nginx 2)" "$(get download-deltasnap 2)" "$(ratio "$(get download-deltasnap 2)" "$(get download-nginx 2)")"
printf '| 20 KiB blobs (req/s)    | %10s | %10s | %6s | ≥ 0.8  |\n' "$(get small-nginx 2)" "$(get small-deltasnap 2)" "$(ratio "$(get small-deltasnap 2)" "$(get small-nginx 2)")"
printf '| … server CPU µs/request | %10s | %10s | %6s |        |\n' "$(get small-nginx 4)" "$(get small-deltasnap 4)" "$(ratio "$(get small-deltasnap 4)" "$(get small-nginx 4)")"
printf '| … nginx open_file_cache | %10s | %10s | %6s |        |\n' "$(get small-nginx-ofc 2)" "$(get small-deltasnap 2)" "$(ratio "$(get small-deltasnap 2)" "$(get small-nginx-ofc 2)")"
printf '| … its CPU µs/request    | %10s | %10s | %6s |        |\n' "$(get small-nginx-ofc 4)" "$(get small-deltasnap 4)" "$(ratio "$(get small-deltasnap 4)" "$(get small-nginx-ofc 4)")"
printf '| upload whole (MB/s)     |          - | %10s |      - | ≥ 105 (100 MiB/s) |\n' "$(get upload-whole 2)"
printf '| upload resumable (MB/s) |          - | %10s |      - | ≥ 105 |\n' "$(get upload-resumable 2)"
if ((RSS_GB > 0)); then
    echo
    echo "server RSS (MB): before $(get rss 2), after a $RSS_GB GiB upload $(get rss 3), after its download $(get rss 4) (peak $(get rss 5)); growth $(awk -v a="$(get rss 4)" -v b="$(get rss 2)" 'BEGIN { printf "%.1f", a - b }') MB [< 50]"
fi
non2xx="$(get small-nginx 3)$(get small-nginx-ofc 3)$(get small-deltasnap 3)"
[[ -z "$non2xx" ]] || echo "non-2xx answers in the small case: nginx $(get small-nginx 3), nginx open_file_cache $(get small-nginx-ofc 3), deltasnap $(get small-deltasnap 3)"
