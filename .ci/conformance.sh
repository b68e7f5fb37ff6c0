#!/usr/bin/env bash
# The server held to its published description (docs/openapi.yaml), as a third party sees it:
#   1. openapi-spec-validator checks the description itself;
#   2. schemathesis sends generated requests to a live `deltasnap serve` on 127.0.0.1 (with
#      the sample data and a write token) for every operation, then a stateful run along the
#      description's links, and fails on any server error or any response that does not
#      conform (status code, content type, headers, body schema);
#   3. the server's own log must show no "request failed" (a 500 it answered).
# Both tools come from PyPI into a virtual environment under .build/ (never the system Python).
#
# Generated requests would name collections, partitions and tokens that do not exist and
# mostly reach 404s: .ci/conformance_hooks.py steers most valid ones (STEER percent) onto the
# imported data, with head tokens read from the live server, and leaves invalid ones alone;
# .ci/schemathesis.toml holds the run's settings. After each run, one line per operation says
# how many requests got a 2xx (.ci/conformance_report.py), e.g.
#   conformance: GET /v1/collections/{name}: 61 of 72 answered 2xx (valid: 58 of 63)
#
#   .ci/conformance.sh                        # CI: bounded examples and time
#   MAX_EXAMPLES=200 .ci/conformance.sh       # a longer search
#   KEEP_WORK=1 .ci/conformance.sh            # keep the store, logs and reports afterwards
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BIN="${BIN:-$ROOT/.build/debug/deltasnap}"
MAX_EXAMPLES="${MAX_EXAMPLES:-50}"
SEED="${SEED:-1}"
# Bounds each schemathesis run; CI must fail rather than hang.
TIME_LIMIT="${TIME_LIMIT:-600}"
# The share (percent) of valid generated requests steered onto existing data.
STEER="${STEER:-80}"
VENV="$ROOT/.build/python-venv"
SCHEMATHESIS_VERSION=4.32.5
VALIDATOR_VERSION=0.9.0

[ -x "$BIN" ] || { echo "conformance: $BIN is missing; run 'swift build' first" >&2; exit 1; }

# (Read whole, not piped into `grep -q`: under pipefail a writer cut off by grep's early exit
# would fail the test and reinstall every time.)
installed_st="$("$VENV/bin/st" --version 2>/dev/null || true)"
installed_validator="$("$VENV/bin/pip" show openapi-spec-validator 2>/dev/null || true)"
if [[ "$installed_st" != *"version $SCHEMATHESIS_VERSION"* ]] \
    || [[ $'\n'"$installed_validator" != *$'\n'"Version: $VALIDATOR_VERSION"$'\n'* ]]; then
    if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
        sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv
    fi
    echo "conformance: installing schemathesis $SCHEMATHESIS_VERSION and openapi-spec-validator $VALIDATOR_VERSION into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check \
        "schemathesis==$SCHEMATHESIS_VERSION" "openapi-spec-validator==$VALIDATOR_VERSION"
fi

echo "conformance: openapi-spec-validator docs/openapi.yaml"
"$VENV/bin/openapi-spec-validator" docs/openapi.yaml

WORK="$(mktemp -d "${TMPDIR:-/tmp}/deltasnap-conformance.XXXXXX")"
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
    if [ -n "${KEEP_WORK:-}" ]; then echo "conformance: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

TOKEN="conformance-write-token"
"$BIN" import --db "$WORK/store.sqlite" --collection countries Snapshots/sample/countries.ndjson >/dev/null
"$BIN" import --db "$WORK/store.sqlite" --collection items <(printf '{"id":"r0000001","name":"one"}\n{"id":"a","v":1}\n') >/dev/null
# Partitions under access rules (PROTOCOL.md §10): alice owns attempts/alice and is a member
# of sets/8271; bob owns attempts/bob. The runs below as each of them see only their slice.
"$BIN" import --db "$WORK/store.sqlite" --collection attempts --partition-by owner \
    <(printf '{"id":"a1","owner":"alice","score":3}\n{"id":"b1","owner":"bob","score":5}\n') >/dev/null
"$BIN" import --db "$WORK/store.sqlite" --collection sets --partition-by set <(printf '{"id":"q1","set":"8271"}\n') >/dev/null
"$BIN" import --db "$WORK/store.sqlite" --collection members/alice <(printf '{"id":"sets/8271","role":"write"}\n') >/dev/null
# A reviewed collection (PROTOCOL.md §13): its review endpoints answer the admin token.
"$BIN" import --db "$WORK/store.sqlite" --collection catalogue <(printf '{"id":"c1","price":1}\n') >/dev/null
cat >"$WORK/rules.yaml" <<'YAML'
collections:
  countries: { read: public, write: admin }
  items:     { read: public, write: claims }
  attempts:  { partitioned: true, read: owner, write: owner }
  sets:      { partitioned: true, read: member, write: member }
  catalogue: { read: public, review: { editors: editor, reviewers: reviewer } }
memberships: members
YAML
JWT_SECRET="conformance-jwt-secret"
"$BIN" keygen --out "$WORK/keys" >/dev/null
# Port 0: the kernel picks a free loopback port; the "serving" line says which.
"$BIN" serve --db "$WORK/store.sqlite" --host 127.0.0.1 --port 0 --write-token "$TOKEN" \
    --max-body-bytes 1048576 --signing-key "$WORK/keys/signing.key" --rules "$WORK/rules.yaml" --jwt-secret "$JWT_SECRET" --console \
    >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVER_PID=$!
PORT=""
for _ in $(seq 1 300); do
    PORT="$(sed -n 's#^deltasnap: serving .* on http://127.0.0.1:\([0-9]*\) .*#\1#p' "$WORK/serve.out")"
    [ -n "$PORT" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/serve.err" >&2; echo "conformance: deltasnap serve exited" >&2; exit 1; }
    sleep 0.1
done
[ -n "$PORT" ] || { echo "conformance: deltasnap serve did not start" >&2; exit 1; }

CHECKS=not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance
export SCHEMATHESIS_HOOKS="$ROOT/.ci/conformance_hooks.py"
export CONFORMANCE_URL="http://127.0.0.1:$PORT" CONFORMANCE_STEER="$STEER"
export CONFORMANCE_COLLECTIONS="countries items catalogue" CONFORMANCE_MEMBERSHIPS="members"
export CONFORMANCE_PARTITIONS="attempts/alice attempts/bob sets/8271 members/alice"
# A user's token never gets a 2xx from the owner's write API (tag `writes`: `403 owner_only`
# on a partition they may read, `404` on one they may not, PROTOCOL.md §5.4): for the runs as
# users those operations are, like the `not-allowed` ones, refused by design, and the warnings
# about refused requests say nothing about them.
cp "$ROOT/.ci/schemathesis.toml" "$WORK/schemathesis-users.toml"
cat >>"$WORK/schemathesis-users.toml" <<'TOML'

[[operations]]
include-tag = "writes"
warnings = [
    "base_url_mismatch", "missing_deserializer", "unused_openapi_auth", "unsupported_regex",
    "method_not_allowed", "constants_extraction", "unmatched_filter", "unresolvable_reference",
    "rate_limited", "dictionary_mismatch", "timeout_units",
]
TOML
# One schemathesis run: NAME AUTHORIZATION CONFIG PATH-REGEX BY-DESIGN ST-ARGS... Prints the
# end of its report and one line per operation; exits the script on a failure.
run_schemathesis() {
    local name="$1" authorization="$2" config="$3" path_regex="$4" by_design="$5"
    shift 5
    local log="$WORK/schemathesis-$name.log" status=0 report=()
    : >"$WORK/counts-$name.tsv"
    # Every request and response, for a look afterwards (KEEP_WORK).
    [ -z "${KEEP_WORK:-}" ] || report=(--report ndjson --report-ndjson-path "$WORK/schemathesis-$name.ndjson")
    CONFORMANCE_AUTH="$authorization" CONFORMANCE_COUNTS="$WORK/counts-$name.tsv" \
        timeout "$TIME_LIMIT" "$VENV/bin/st" --config-file "$config" run docs/openapi.yaml \
        --url "http://127.0.0.1:$PORT" -H "Authorization: $authorization" \
        ${path_regex:+--include-path-regex "$path_regex"} \
        --seed "$SEED" --workers 1 --no-color --generation-database none --checks "$CHECKS" \
        ${report[@]+"${report[@]}"} "$@" >"$log" 2>&1 || status=$?
    if [ "$status" -ne 0 ]; then
        # The failures, warnings and summary; the log's start is the progress of each operation.
        if grep -q "= FAILURES =" "$log"; then sed -n '/= FAILURES =/,$p' "$log"; else tail -n 60 "$log"; fi
    else
        # The warnings (at most 80 lines of them) and the summary.
        awk '/= WARNINGS =/ { on = 1 } /= SUMMARY =/ { on = 2 } on == 1 && n++ < 80 || on == 2' "$log"
    fi
    "$VENV/bin/python" "$ROOT/.ci/conformance_report.py" docs/openapi.yaml "$WORK/counts-$name.tsv" \
        --prefix "$([ "$name" = admin ] || echo "as $name: ")" --paths "$path_regex" ${by_design:+--by-design "$by_design"}
    if grep -q "mostly rejected generated data" "$log"; then
        echo "conformance: WARNING: schemathesis reports operations that mostly rejected generated data (see above)" >&2
    fi
    if [ "$status" -ne 0 ]; then
        [ "$status" -eq 124 ] && echo "conformance: schemathesis as $name ran out of its ${TIME_LIMIT}s" >&2
        echo "conformance: schemathesis as $name FAILED (exit $status); the report is above" >&2
        exit 1
    fi
}

echo "conformance: schemathesis on http://127.0.0.1:$PORT ($MAX_EXAMPLES examples per operation, seed $SEED, ${STEER}% of valid requests steered to the data, ${TIME_LIMIT}s at most per run)"
run_schemathesis admin "Bearer $TOKEN" "$ROOT/.ci/schemathesis.toml" "" "" \
    --phases examples,coverage,fuzzing,stateful --max-examples "$MAX_EXAMPLES"
# Then as two users, on what their tokens change: the partitions' endpoints and the view.
for user in alice bob; do
    USER_TOKEN="$("$BIN" token --secret "$JWT_SECRET" --subject "$user" --write items)"
    echo "conformance: schemathesis as $user on the partitions and /v1/index"
    run_schemathesis "$user" "Bearer $USER_TOKEN" "$WORK/schemathesis-users.toml" '/partitions/|^/v1/index$' writes=403 \
        --phases examples,coverage,fuzzing --max-examples "$(( (MAX_EXAMPLES + 4) / 5 ))"
done
if grep -q "request failed" "$WORK/serve.err" "$WORK/serve.out"; then
    grep "request failed" "$WORK/serve.err" "$WORK/serve.out" | head -5 >&2
    echo "conformance: the server logged a failed request (a 500)" >&2
    exit 1
fi
kill -0 "$SERVER_PID" 2>/dev/null || { echo "conformance: the server died during the run" >&2; exit 1; }
echo "conformance: the server conforms to docs/openapi.yaml"
