# Sourced (not run) by run-postgres.sh and Benchmarks/bench-postgres.sh: a throwaway
# PostgreSQL cluster from Debian's packages, on a free loopback port, as the unprivileged
# `postgres` user when run as root (PostgreSQL refuses root).
#
#   start_postgres_cluster DIR        # sets PG_PORT, PG_URL, PG_DIR
#   stop_postgres_cluster             # fast shutdown, by the postmaster's PID

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

as_postgres_user() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

start_postgres_cluster() {
    local bin
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    [ -x "$bin/initdb" ] || { echo "PostgreSQL is not installed (make deps installs it)" >&2; return 1; }
    PG_DIR="$1/pg"
    mkdir -p "$PG_DIR"
    chmod 755 "$1" "$PG_DIR"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$PG_DIR"
    PG_PORT=$(free_port)
    as_postgres_user "$bin/initdb" -D "$PG_DIR/data" -U deltasnap --auth=trust -E UTF8 --locale=C --no-sync >/dev/null
    as_postgres_user "$bin/postgres" -D "$PG_DIR/data" -p "$PG_PORT" -k "$PG_DIR" -c listen_addresses=127.0.0.1 \
        "${@:2}" >"$PG_DIR/server.log" 2>&1 &
    for _ in $(seq 1 300); do
        grep -q "ready to accept" "$PG_DIR/server.log" 2>/dev/null && break
        sleep 0.1
    done
    grep -q "ready to accept" "$PG_DIR/server.log" || { cat "$PG_DIR/server.log" >&2; return 1; }
    PG_URL="postgres://deltasnap@127.0.0.1:$PG_PORT/postgres"
}

stop_postgres_cluster() {
    local pid
    [ -n "${PG_DIR:-}" ] && [ -f "$PG_DIR/data/postmaster.pid" ] || return 0
    pid=$(head -1 "$PG_DIR/data/postmaster.pid")
    kill -INT "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
}
