# Shared by the bench-*.sh scripts (sourced, not run): the release binary, a temporary
# directory, nginx, and a cleanup that stops every process they started, by PID.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# An older or other build may be named by BIN (e.g. BIN=/tmp/deltasnap-old Benchmarks/bench-live.sh).
BIN="${BIN:-$ROOT/.build/release/deltasnap}"
COLLECTION=items
PIDS=()

say() { printf '== %s\n' "$*" >&2; }

# Peak and current resident memory of a process, in MB.
vmhwm_mb() { awk '/VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
vmrss_mb() { awk '/VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }

# The ETag a URL answers with (extra curl arguments after the URL).
etag_of() {
    local url="$1"; shift
    curl -s -o /dev/null -D - "$@" "$url" | tr -d '\r' | awk -F': ' 'tolower($1) == "etag" { print $2 }'
}

# Waits until URL answers another ETag than OLD_ETAG (a write reaches a running serve
# through its watcher).
wait_for_change() { # URL OLD_ETAG
    for _ in $(seq 1 200); do
        [[ "$(etag_of "$1")" != "$2" ]] && return 0
        sleep 0.05
    done
    echo "the server never served the change at $1" >&2; exit 1
}

# One 1-record change through the write API (bearer $TOKEN); returns once it is served.
change_one() { # COLLECTION_URL VALUE
    local before; before="$(etag_of "$1")"
    curl -s -o /dev/null -X PUT -H "Authorization: Bearer $TOKEN" -d "{\"changed\":\"$2\"}" "$1/records/bench-delta"
    wait_for_change "$1" "$before"
}

# Installs the Debian packages whose commands are missing.
# Runs one command as a user would (its output discarded; its stderr shown, and the script
# stopped, when it fails); prints "SECONDS PEAK_KB" of the whole process: wall time from a
# nanosecond clock (time's own %e counts in hundredths: too coarse for a delta), peak RSS
# from /usr/bin/time.
measure_process() {
    local start end
    start=$(date +%s%N)
    /usr/bin/time -f '%M' -o "$TMP/time.out" "$@" >/dev/null 2>"$TMP/step.err" || { cat "$TMP/step.err" >&2; echo "failed: $*" >&2; exit 1; }
    end=$(date +%s%N)
    echo "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.4f", (b - a) / 1e9 }') $(cat "$TMP/time.out")"
}

need() {
    local missing=()
    for pkg in "$@"; do
        command -v "$pkg" >/dev/null 2>&1 || [[ -x "/usr/sbin/$pkg" ]] || missing+=("$pkg")
    done
    if ((${#missing[@]})); then
        say "installing ${missing[*]}"
        local sudo=""; [[ $(id -u) -ne 0 ]] && sudo=sudo
        $sudo apt-get install -y -qq "${missing[@]}" >/dev/null || { $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}" >/dev/null; }
    fi
}

# Builds the release binary unless SKIP_BUILD is set and it exists.
build_release() {
    if [[ -z "${SKIP_BUILD:-}" || ! -x "$BIN" ]]; then
        say "building deltasnap (release)"
        (cd "$ROOT" && swift build -c release --product deltasnap 2>&1 | tail -1) >&2
    fi
}

# Creates $TMP (named after $1) and arranges for everything to be stopped and removed on exit.
make_workspace() {
    TMP="$(mktemp -d "${TMPDIR:-/tmp}/deltasnap-$1.XXXXXX")"
    trap cleanup EXIT
    trap 'exit 130' INT TERM
}

cleanup() {
    local pid
    for pid in "${PIDS[@]:-}"; do
        [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    done
    rm -rf "$TMP"
}

# Starts nginx on loopback ports with the `http` block's own lines read from stdin (servers,
# upstreams) after the settings every bench shares: temporary files under $TMP/nginx,
# keep-alive connections that are never closed for their request count, the access log off
# unless NGINX_ACCESS_LOG gives its directive, NGINX_WORKERS workers (default: one per core,
# as deployed). Sets NGINX_PID; nginx is stopped on exit with the rest. Waits for URL ($1).
start_nginx_with() { # URL_TO_WAIT_FOR  <http-block lines
    local nginx
    nginx="$(command -v nginx || echo /usr/sbin/nginx)"
    mkdir -p "$TMP/nginx/tmp"
    # nginx workers started by root run as "nobody": they must be able to enter $TMP.
    chmod 755 "$TMP"
    {
        cat <<EOF
daemon off;
worker_processes ${NGINX_WORKERS:-auto};
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log warn;
events { worker_connections ${NGINX_WORKER_CONNECTIONS:-1024}; }
http {
    ${NGINX_ACCESS_LOG:-access_log off;}
    client_body_temp_path $TMP/nginx/tmp/body;
    proxy_temp_path $TMP/nginx/tmp/proxy;
    fastcgi_temp_path $TMP/nginx/tmp/fastcgi;
    uwsgi_temp_path $TMP/nginx/tmp/uwsgi;
    scgi_temp_path $TMP/nginx/tmp/scgi;
    keepalive_requests 1000000;
EOF
        cat
        echo "}"
    } >"$TMP/nginx/nginx.conf"
    "$nginx" -e "$TMP/nginx/error.log" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
    NGINX_PID=$!
    PIDS+=("$NGINX_PID")
    for _ in $(seq 1 100); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done
    echo "nginx did not answer $1; its log:" >&2
    cat "$TMP/nginx/error.log" >&2
    exit 1
}

# Starts `BINARY serve --db DB --host 127.0.0.1 --port PORT [flags…]` (stdout in
# $TMP/serve.out, stderr appended to $TMP/serve.err), waits for its "serving" line and sets
# DS_PID; the process is stopped on exit with the rest.
copy_store() { # SOURCE.sqlite DEST.sqlite — the file with its -wal and -shm, as they are
    local suffix
    for suffix in "" -wal -shm; do
        [[ -f "$1$suffix" ]] && cp "$1$suffix" "$2$suffix"
    done
    return 0
}

start_serve() { # BINARY DB PORT [serve flags…]
    local bin="$1" db="$2" port="$3"
    shift 3
    "$bin" serve --db "$db" --host 127.0.0.1 --port "$port" "$@" >"$TMP/serve.out" 2>>"$TMP/serve.err" &
    DS_PID=$!
    PIDS+=("$DS_PID")
    for _ in $(seq 1 300); do
        grep -q "deltasnap: serving" "$TMP/serve.out" 2>/dev/null && return 0
        kill -0 "$DS_PID" 2>/dev/null || { cat "$TMP/serve.err" >&2; echo "deltasnap serve exited" >&2; exit 1; }
        sleep 0.1
    done
    echo "deltasnap serve did not start" >&2; exit 1
}

# Runs wrk for $DURATION and appends "NAME req/s p50ms p99ms non-2xx/3xx" to $RESULTS;
# stops the run when a server in WATCH_PIDS died meanwhile.
run_wrk() { # NAME URL [header...]
    local name="$1" url="$2"; shift 2
    local args=()
    for h in "$@"; do args+=(-H "$h"); done
    say "wrk $name"
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "${args[@]}" "$url" >"$TMP/wrk-$name.txt" || true
    local pid
    for pid in "${WATCH_PIDS[@]:-}"; do
        [[ -z "$pid" ]] || kill -0 "$pid" 2>/dev/null && continue
        echo "a server (pid $pid) died during '$name'; stderr:" >&2
        head -40 "$TMP"/serve*.err >&2 || true
        exit 1
    done
    awk -v name="$name" '
        function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
        /Requests\/sec/ { rps = $2 }
        $1 == "50.000%" { p50 = ms($2) }
        $1 == "99.000%" { p99 = ms($2) }
        $1 == "50%" { p50 = ms($2) }
        $1 == "99%" { p99 = ms($2) }
        /Non-2xx or 3xx/ { bad = $NF }
        /Socket errors/ { err = $0 }
        END { printf "%s\t%s\t%.2f\t%.2f\t%s\n", name, rps, p50, p99, (bad == "" ? 0 : bad) }
    ' "$TMP/wrk-$name.txt" >>"$RESULTS"
}
