#!/usr/bin/env bash
# Review before publish (docs/PROTOCOL.md §13), measured as a user drives it, beside an import
# of the same records in the same sitting:
#   1. a store of ROWS records (`deltasnap generate`), served with `catalogue` reviewed, at
#      serve's default logging (a request line per answer), as a user starts it;
#   2. the reference: `deltasnap import` of ROWS changed records into a plain collection;
#   3. the same records imported into `catalogue` (its workspace), then `POST …/review/request`
#      and `POST …/review/approve` timed with curl — the approval publishes ROWS records as one
#      version; the line `approve: N.NN× import` compares the two;
#   4. a change of DIFF records of ROWS in the workspace, spread evenly: the first page of
#      `GET …/review` (100 changes), median of REPEAT requests.
# DEST=postgres runs it all on a throwaway PostgreSQL cluster on a free loopback port.
#   SKIP_BUILD=1 ROWS=100000 DIFF=10000 REPEAT=5 [DEST=postgres] Benchmarks/bench-review.sh
set -euo pipefail
source "$(dirname "$0")/bench-common.sh"
source "$ROOT/.ci/postgres-cluster.sh"
ROWS="${ROWS:-100000}"
DIFF="${DIFF:-10000}"
REPEAT="${REPEAT:-5}"
DS_PORT="${DS_PORT:-18095}"
need curl
build_release
make_workspace review
ADMIN=bench-admin
DB="$TMP/store.sqlite"
if [[ "${DEST:-sqlite}" == postgres ]]; then
    say "PostgreSQL"
    trap 'stop_postgres_cluster; cleanup' EXIT
    start_postgres_cluster "$TMP"
    DB="$PG_URL"
fi
cat >"$TMP/rules.yaml" <<'YAML'
collections:
  catalogue: { read: public, review: { editors: editor, reviewers: reviewer } }
  plain:     { read: public, write: admin }
YAML
say "generating $ROWS records, twice (the second set changed)"
"$BIN" generate --count "$ROWS" --seed 1 >"$TMP/v1.ndjson"
"$BIN" generate --count "$ROWS" --seed 2 >"$TMP/v2.ndjson"
"$BIN" import --db "$DB" --collection catalogue --quiet "$TMP/v1.ndjson" >/dev/null
"$BIN" import --db "$DB" --collection plain --quiet "$TMP/v1.ndjson" >/dev/null
start_serve "$BIN" "$DB" "$DS_PORT" --write-token "$ADMIN" --rules "$TMP/rules.yaml" --jwt-secret bench-secret
URL="http://127.0.0.1:$DS_PORT/v1/collections"

seconds() { # command… → elapsed seconds of the command
    local start end
    start=$(date +%s.%N)
    "$@" >/dev/null
    end=$(date +%s.%N)
    echo "$end - $start" | bc -l
}
post() { curl -sf -X POST -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' -d "${2:-{\}}" "$URL/catalogue/review/$1"; }

say "reference: import $ROWS changed records into a plain collection"
import_s=$(seconds "$BIN" import --db "$DB" --collection plain --quiet "$TMP/v2.ndjson")
say "the same records into the reviewed collection's workspace"
"$BIN" import --db "$DB" --collection catalogue --quiet "$TMP/v2.ndjson" >/dev/null
request_s=$(seconds post request '{"comment":"bench"}')
approve_s=$(seconds post approve '{"comment":"bench"}')
printf 'import of %d changed records into a plain collection: %.2f s\n' "$ROWS" "$import_s"
printf 'request (freeze the workspace): %.2f s\n' "$request_s"
printf 'approve (publish %d records as one version): %.2f s\n' "$ROWS" "$approve_s"
printf 'approve: %.2f× import\n' "$(echo "$approve_s / $import_s" | bc -l)"

say "a change of $DIFF records in the workspace; the first page of its diff"
# Spread over the collection (every ROWS/DIFF-th record), so a page reads as far as its changes lie.
awk -v every="$((ROWS / DIFF))" 'NR % every == 0' "$TMP/v1.ndjson" >"$TMP/diff.ndjson"
"$BIN" import --db "$DB" --collection catalogue --quiet "$TMP/diff.ndjson" >/dev/null
times=()
for _ in $(seq 1 "$REPEAT"); do
    times+=("$(curl -s -o /dev/null -w '%{time_total}' -H "Authorization: Bearer $ADMIN" "$URL/catalogue/review?limit=100")")
done
median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
count=$(curl -s -H "Authorization: Bearer $ADMIN" "$URL/catalogue/review?limit=100" | grep -o '"change":' | wc -l)
printf 'first page of the diff (%d of %d changes shown, of %d records): median %.0f ms (%s)\n' "$count" "$DIFF" "$ROWS" "$(echo "$median * 1000" | bc -l)" "${times[*]}"
