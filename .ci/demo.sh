#!/usr/bin/env bash
# `make demo`: an end-to-end walk through DeltaSnap on 127.0.0.1, stopping what it starts.
set -euo pipefail
BIN=${BIN:-.build/debug/deltasnap}
PORT=${DEMO_PORT:-18090}
URL="http://127.0.0.1:$PORT/v1/collections/countries"
TOKEN=demo-write-token
JWT_SECRET=demo-jwt-secret
work=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
start_server() {
  "$BIN" serve --db "$work/store.sqlite" --port "$PORT" --write-token "$TOKEN" --jwt-secret "$JWT_SECRET" --log-level warning > "$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 100); do grep -q "serving" "$work/server.log" 2>/dev/null && break; sleep 0.1; done
  grep "serving" "$work/server.log"
}
stop_server() { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""; }

step "1. The data owner imports the sample (the same pinned store the bundled snapshot was baked from)"
SOURCE_DATE_EPOCH=1767225600 DELTASNAP_EPOCH=00000000005a3b1e \
  "$BIN" import --db "$work/store.sqlite" --collection countries Snapshots/sample/countries.ndjson
start_server

step "2. First start, offline: the app loads its bundled snapshot (nothing listens on port 9)"
"$BIN" pull --url "http://127.0.0.1:9/v1/collections/countries" --replica "$work/app.sqlite" \
  --snapshot Snapshots/countries.snapshot --timeout 2

step "3. Online: the bundled token is current, so the server answers 304"
"$BIN" pull --url "$URL" --replica "$work/app.sqlite"

step "4. The server's data changes: Andorra renamed, XX added, Antarctica hidden"
curl -s -X PUT -H "Authorization: Bearer $TOKEN" -d '{"name":"Andorra (updated)","alpha3":"AND"}' "$URL/records/AD"
curl -s -X PUT -H "Authorization: Bearer $TOKEN" -d '{"name":"Example"}' "$URL/records/XX"
curl -s -X DELETE -H "Authorization: Bearer $TOKEN" "$URL/records/AQ"

step "5. The app syncs: only the delta travels"
"$BIN" pull --url "$URL" --replica "$work/app.sqlite"
"$BIN" pull --url "$URL" --replica "$work/app.sqlite"

step "6. Forced reset: the server's store is rebuilt (a new epoch); the client's token means nothing there"
stop_server
rm -f "$work"/store.sqlite*
"$BIN" import --db "$work/store.sqlite" --collection countries Snapshots/sample/countries.ndjson
start_server
"$BIN" pull --url "$URL" --replica "$work/app.sqlite"

step "7. The replica equals the server's state, byte for byte"
if cmp -s <("$BIN" dump --replica "$work/app.sqlite") <("$BIN" export --db "$work/store.sqlite" --collection countries); then
  echo "dump == export ($("$BIN" dump --replica "$work/app.sqlite" | wc -l) records)"
else
  echo "dump differs from export" >&2; exit 1
fi

step "8. Two phones edit offline: different fields of one record, and a create-only answer each"
USER_TOKEN=$("$BIN" token --secret "$JWT_SECRET" --subject student --write countries --expires-in 600)
for phone in a b; do
  "$BIN" pull --url "http://127.0.0.1:9/v1/collections/countries" --replica "$work/phone-$phone.sqlite" \
    --snapshot Snapshots/countries.snapshot --timeout 2 >/dev/null || true
done
"$BIN" local patch --replica "$work/phone-a.sqlite" FR '{"name":"France (edited on phone A)"}'
"$BIN" local patch --replica "$work/phone-b.sqlite" FR '{"note":"added on phone B"}'
"$BIN" local insert --replica "$work/phone-a.sqlite" answer-1 '{"choice":"a"}'
"$BIN" local insert --replica "$work/phone-b.sqlite" answer-1 '{"choice":"b"}'
echo "phone A's queue:"; "$BIN" pending --replica "$work/phone-a.sqlite"

step "9. Back online: each phone pushes, then pulls (the server merges per field, keeps the first answer)"
"$BIN" sync --url "$URL" --replica "$work/phone-a.sqlite" --token "$USER_TOKEN"
"$BIN" sync --url "$URL" --replica "$work/phone-b.sqlite" --token "$USER_TOKEN"
"$BIN" sync --url "$URL" --replica "$work/phone-a.sqlite" --token "$USER_TOKEN"
"$BIN" history --url "$URL" FR

step "10. Both phones hold the server's state, byte for byte"
for phone in a b; do
  if cmp -s <("$BIN" dump --replica "$work/phone-$phone.sqlite") <("$BIN" export --db "$work/store.sqlite" --collection countries); then
    echo "phone $phone: dump == export; FR is $(grep '"id":"FR"' <("$BIN" dump --replica "$work/phone-$phone.sqlite"))"
  else
    echo "phone $phone differs from export" >&2; exit 1
  fi
done
