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
#   .ci/conformance.sh                        # CI: bounded examples and time
#   MAX_EXAMPLES=200 .ci/conformance.sh       # a longer search
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BIN="${BIN:-$ROOT/.build/debug/deltasnap}"
MAX_EXAMPLES="${MAX_EXAMPLES:-50}"
SEED="${SEED:-1}"
# Bounds the whole schemathesis run; CI must fail rather than hang.
TIME_LIMIT="${TIME_LIMIT:-600}"
VENV="$ROOT/.build/python-venv"
SCHEMATHESIS_VERSION=4.32.5
VALIDATOR_VERSION=0.9.0

[ -x "$BIN" ] || { echo "conformance: $BIN is missing; run 'swift build' first" >&2; exit 1; }

if ! "$VENV/bin/st" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION" \
    || ! "$VENV/bin/pip" show openapi-spec-validator 2>/dev/null | grep -q "^Version: $VALIDATOR_VERSION"; then
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
    rm -rf "$WORK"
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
cat >"$WORK/rules.yaml" <<'YAML'
collections:
  countries: { read: public, write: admin }
  items:     { read: public, write: claims }
  attempts:  { partitioned: true, read: owner, write: owner }
  sets:      { partitioned: true, read: member, write: member }
memberships: members
YAML
JWT_SECRET="conformance-jwt-secret"
"$BIN" keygen --out "$WORK/keys" >/dev/null
# Port 0: the kernel picks a free loopback port; the "serving" line says which.
"$BIN" serve --db "$WORK/store.sqlite" --host 127.0.0.1 --port 0 --write-token "$TOKEN" \
    --max-body-bytes 1048576 --signing-key "$WORK/keys/signing.key" --rules "$WORK/rules.yaml" --jwt-secret "$JWT_SECRET" \
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

echo "conformance: schemathesis on http://127.0.0.1:$PORT ($MAX_EXAMPLES examples per operation, seed $SEED, ${TIME_LIMIT}s at most)"
status=0
timeout "$TIME_LIMIT" "$VENV/bin/st" run docs/openapi.yaml --url "http://127.0.0.1:$PORT" \
    -H "Authorization: Bearer $TOKEN" \
    --phases examples,coverage,fuzzing,stateful \
    --max-examples "$MAX_EXAMPLES" --seed "$SEED" --workers 1 --no-color --generation-database none \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
    >"$WORK/schemathesis.log" 2>&1 || status=$?
tail -n 40 "$WORK/schemathesis.log"
if [ "$status" -ne 0 ]; then
    echo "conformance: schemathesis FAILED (exit $status); the full report is above" >&2
    exit 1
fi
# Then as two users, on what their tokens change: the partitions' endpoints and the view.
for user in alice bob; do
    USER_TOKEN="$("$BIN" token --secret "$JWT_SECRET" --subject "$user" --write items)"
    echo "conformance: schemathesis as $user on the partitions and /v1/index"
    timeout "$TIME_LIMIT" "$VENV/bin/st" run docs/openapi.yaml --url "http://127.0.0.1:$PORT" \
        -H "Authorization: Bearer $USER_TOKEN" --include-path-regex '/partitions/|^/v1/index$' \
        --phases examples,coverage,fuzzing \
        --max-examples "$(( (MAX_EXAMPLES + 4) / 5 ))" --seed "$SEED" --workers 1 --no-color --generation-database none \
        --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
        >"$WORK/schemathesis-$user.log" 2>&1 || status=$?
    tail -n 8 "$WORK/schemathesis-$user.log"
    if [ "$status" -ne 0 ]; then
        echo "conformance: schemathesis as $user FAILED (exit $status)" >&2
        exit 1
    fi
done
if grep -q "request failed" "$WORK/serve.err" "$WORK/serve.out"; then
    grep "request failed" "$WORK/serve.err" "$WORK/serve.out" | head -5 >&2
    echo "conformance: the server logged a failed request (a 500)" >&2
    exit 1
fi
kill -0 "$SERVER_PID" 2>/dev/null || { echo "conformance: the server died during the run" >&2; exit 1; }
echo "conformance: the server conforms to docs/openapi.yaml"
