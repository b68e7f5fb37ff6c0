#!/usr/bin/env bash
# The scale-out set-up on one machine: a throwaway PostgreSQL cluster, the sample imported
# into it, two stateless `deltasnap serve` instances on it, and nginx load-balancing them on
# $HOST:$PORT. Everything runs in the foreground; Ctrl-C stops all of it (by PID).
#
#   make run-postgres                      # then: curl -si http://127.0.0.1:8080/v1/collections/countries
#   DELTASNAP_WRITE_TOKEN=secret make run-postgres   # writes through either instance reach both
#   deltasnap follow --source "$PG_URL" --db "$PG_URL" --table products --create   # a table of yours, served
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.build/release/deltasnap}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8080}
source "$(dirname "$0")/postgres-cluster.sh"
WORK=$(mktemp -d /tmp/deltasnap-run-postgres.XXXXXX)

pids=()
cleanup() {
  stop_postgres_cluster
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# wal_level=logical: `deltasnap follow` can publish tables of this database too (README).
start_postgres_cluster "$WORK" -c wal_level=logical
echo "run-postgres: PostgreSQL cluster in $PG_DIR on 127.0.0.1:$PG_PORT ($PG_URL)"
DB="$PG_URL"

"$BIN" import --db "$DB" --collection countries Snapshots/sample/countries.ndjson

instance_ports=()
for n in 1 2; do
  port=$(free_port)
  instance_ports+=("$port")
  "$BIN" serve --db "$DB" --host 127.0.0.1 --port "$port" &
  pids+=($!)
done
for port in "${instance_ports[@]}"; do
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
done

mkdir -p "$WORK/nginx"
cat >"$WORK/nginx/nginx.conf" <<CONF
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  upstream deltasnap {
    server 127.0.0.1:${instance_ports[0]};
    server 127.0.0.1:${instance_ports[1]};
    keepalive 32;
  }
  server {
    listen $HOST:$PORT;
    location / {
      proxy_pass http://deltasnap;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      # Another instance when one is down or answers 503 (the database restarting).
      proxy_next_upstream error timeout http_503;
    }
  }
}
CONF
nginx -e "$WORK/nginx/error.log" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" &
pids+=($!)
echo "run-postgres: nginx on http://$HOST:$PORT balancing instances on ports ${instance_ports[*]} (Ctrl-C stops everything)"
wait -n "${pids[@]}"
