#!/usr/bin/env bash
# Partitions and views (issue 20), on 127.0.0.1 only, with `deltasnap serve` as a user
# starts it (default flags: the request log at info) plus --rules and --jwt-secret:
#   1. `import --partition-by`: IMPORT_RECORDS records into as many partitions (SQLite);
#   2. an unchanged view of VIEW_PARTITIONS partitions answered 304 (token verified on every
#      request), wrk, next to nginx answering 304 for a static file in the same run;
#   3. PARTITIONS partitions in one store, USERS users each polling their view once (a private
#      partition each, plus the shared sets their memberships name): the server's RSS after,
#      and the latency of a changed view (one of VIEW_PARTITIONS changed) over REPEATS.
#
#   Benchmarks/bench-partitions.sh                       # 1,000,000 partitions, 10,000 users
#   PARTITIONS=100000 USERS=1000 Benchmarks/bench-partitions.sh   # a quicker run
#   BIN=/tmp/old/deltasnap SKIP_BUILD=1 Benchmarks/bench-partitions.sh  # another build
#
# JWT_MODE: how the users' tokens are signed and checked (default hs256, as before):
#   hs256       --jwt-secret (minted here with the standard library)
#   eddsa       --jwt-public-key with an Ed25519 PEM key
#   rs256 es256 --jwks-file: a key set read from a file (2048-bit RSA; P-256), kid in the token
#   eddsa-jwks  --jwks-file with an Ed25519 key (OKP)
# Every mode but hs256 mints with PyJWT + cryptography (JWT_PYTHON, default the tests' venv
# .build/jwt-venv/bin/python). A list (JWT_MODE="eddsa rs256 es256 hs256") measures the view's
# 304 for each mode in turn on the same store, serve restarted with that mode's key and warmed
# 2 s, JWT_ROUNDS times (default 1), each round starting one mode further along the list, nginx's
# 304 before each round; part 3 then runs with the first mode.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bench-common.sh"
IMPORT_RECORDS="${IMPORT_RECORDS:-100000}"
VIEW_PARTITIONS="${VIEW_PARTITIONS:-1000}"
PARTITIONS="${PARTITIONS:-1000000}"
USERS="${USERS:-10000}"
REPEATS="${REPEATS:-20}"
DURATION="${DURATION:-10s}"
THREADS="${THREADS:-2}"
CONNECTIONS="${CONNECTIONS:-32}"
DS_PORT="${DS_PORT:-18090}"
NGINX_PORT="${NGINX_PORT:-18091}"
SECRET="bench-partitions-secret"
JWT_MODE="${JWT_MODE:-hs256}"
JWT_ROUNDS="${JWT_ROUNDS:-1}"
JWT_PYTHON="${JWT_PYTHON:-$ROOT/.build/jwt-venv/bin/python}"
read -r -a MODES <<<"$JWT_MODE"
for mode in "${MODES[@]}"; do
    case "$mode" in hs256|eddsa|rs256|es256|eddsa-jwks) ;; *) echo "JWT_MODE: unknown mode '$mode'" >&2; exit 2 ;; esac
    if [[ "$mode" != hs256 ]] && ! "$JWT_PYTHON" -c 'import jwt, cryptography' 2>/dev/null; then
        echo "JWT_MODE=$mode needs PyJWT and cryptography in $JWT_PYTHON (the tests make .build/jwt-venv)" >&2; exit 2
    fi
done

need nginx wrk curl
build_release
make_workspace bench-partitions
RESULTS="$TMP/results.tsv"
: >"$RESULTS"

# ---------------------------------------------------------------- 1. partitioned import
say "import --partition-by: $IMPORT_RECORDS records into $IMPORT_RECORDS partitions"
python3 - "$IMPORT_RECORDS" >"$TMP/import.ndjson" <<'PY'
import sys
for i in range(int(sys.argv[1])):
    print('{"id":"q%d","set":"s%d","question":"%d + %d"}' % (i, i, i, i))
PY
start=$(date +%s.%N)
"$BIN" import --db "$TMP/import.sqlite" --collection sets --partition-by set --quiet "$TMP/import.ndjson" >"$TMP/import.out"
IMPORT_SECONDS=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
IMPORT_RATE=$(awk -v n="$IMPORT_RECORDS" -v t="$IMPORT_SECONDS" 'BEGIN { printf "%.0f", n / t }')
cat "$TMP/import.out" >&2
rm -f "$TMP/import.sqlite"*

# ---------------------------------------------------------------- 3's store (2 uses it too)
DB="$TMP/store.sqlite"
say "store: $PARTITIONS partitions (sets), $USERS users (attempts/uN, members/uN), user 'heavy' member of $VIEW_PARTITIONS sets"
python3 - "$PARTITIONS" "$USERS" "$VIEW_PARTITIONS" "$TMP" <<'PY'
import sys
partitions, users, view, tmp = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with open(tmp + "/sets.ndjson", "w") as f:
    for i in range(partitions):
        f.write('{"id":"q","set":"s%d","question":"%d"}\n' % (i, i))
with open(tmp + "/attempts.ndjson", "w") as f:
    for u in range(users):
        f.write('{"id":"a1","owner":"u%d","score":%d}\n' % (u, u % 7))
with open(tmp + "/members.ndjson", "w") as f:
    for u in range(users):
        for k in range(3):
            f.write('{"id":"sets/s%d","owner":"u%d","role":"read"}\n' % ((u * 3 + k) % partitions, u))
    for k in range(view):
        f.write('{"id":"sets/s%d","owner":"heavy","role":"read"}\n' % (k * (partitions // view)))
PY
"$BIN" import --db "$DB" --collection countries --quiet "$ROOT/Snapshots/sample/countries.ndjson" >/dev/null
for part in sets:set attempts:owner members:owner; do
    "$BIN" import --db "$DB" --collection "${part%%:*}" --partition-by "${part#*:}" --quiet "$TMP/${part%%:*}.ndjson" >&2
done
cat >"$TMP/rules.yaml" <<'YAML'
collections:
  countries: { read: public, write: admin }
  attempts:  { partitioned: true, read: owner, write: owner }
  sets:      { partitioned: true, read: member, write: member }
memberships: members
YAML

# JWTs minted here, one per user, as the app's auth service would: HS256 with the standard
# library; the other modes with PyJWT (a key made per run; its public half in a PEM file or a
# key set file). tokens-MODE.txt: heavy's first, then u0…; SERVE_FLAGS_MODE: serve's flags.
mint_tokens() { # MODE
    local mode="$1"
    if [[ "$mode" == hs256 ]]; then
        python3 - "$SECRET" "$USERS" >"$TMP/tokens-$mode.txt" <<'PY'
import base64, hashlib, hmac, json, sys, time
secret, users = sys.argv[1].encode(), int(sys.argv[2])
def b64(data): return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
for sub in ["heavy"] + ["u%d" % u for u in range(users)]:
    body = b64(json.dumps({"sub": sub, "exp": int(time.time()) + 7200}).encode())
    signature = b64(hmac.new(secret, (header + "." + body).encode(), hashlib.sha256).digest())
    print(header + "." + body + "." + signature)
PY
        return
    fi
    "$JWT_PYTHON" - "$mode" "$USERS" "$TMP" >"$TMP/tokens-$mode.txt" <<'PY'
import json, sys, time
import jwt
from jwt.algorithms import RSAAlgorithm, ECAlgorithm, OKPAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa, ec, ed25519
mode, users, tmp = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if mode == "rs256":
    key, alg, algorithm = rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256", RSAAlgorithm
elif mode == "es256":
    key, alg, algorithm = ec.generate_private_key(ec.SECP256R1()), "ES256", ECAlgorithm
else:
    key, alg, algorithm = ed25519.Ed25519PrivateKey.generate(), "EdDSA", OKPAlgorithm
kid = "bench-" + mode
if mode == "eddsa":
    with open("%s/jwt-%s.pem" % (tmp, mode), "wb") as f:
        f.write(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    headers = {}
else:
    jwk = json.loads(algorithm.to_jwk(key.public_key()))
    jwk.update({"kid": kid, "alg": alg, "use": "sig"})
    with open("%s/jwks-%s.json" % (tmp, mode), "w") as f:
        json.dump({"keys": [jwk]}, f)
    headers = {"kid": kid}
now = int(time.time())
for sub in ["heavy"] + ["u%d" % u for u in range(users)]:
    print(jwt.encode({"sub": sub, "iat": now, "exp": now + 7200}, key, algorithm=alg, headers=headers))
PY
}
serve_flags() { # MODE → SERVE_FLAGS
    case "$1" in
        hs256) SERVE_FLAGS=(--jwt-secret "$SECRET") ;;
        eddsa) SERVE_FLAGS=(--jwt-public-key "$TMP/jwt-eddsa.pem") ;;
        *) SERVE_FLAGS=(--jwks-file "$TMP/jwks-$1.json") ;;
    esac
}
for mode in "${MODES[@]}"; do mint_tokens "$mode"; done
MODE="${MODES[0]}"
cp "$TMP/tokens-$MODE.txt" "$TMP/tokens.txt"
HEAVY_TOKEN="$(head -1 "$TMP/tokens.txt")"
serve_flags "$MODE"
say "tokens: ${MODES[*]} (part 3 with $MODE)"

start_serve "$BIN" "$DB" "$DS_PORT" --rules "$TMP/rules.yaml" "${SERVE_FLAGS[@]}"
INDEX="http://127.0.0.1:$DS_PORT/v1/index"
VIEW_ETAG="$(etag_of "$INDEX" -H "Authorization: Bearer $HEAVY_TOKEN")"
VIEW_COUNT=$(curl -s -H "Authorization: Bearer $HEAVY_TOKEN" "$INDEX" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["index"]["collections"]))')
STATUS=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $HEAVY_TOKEN" -H "If-None-Match: $VIEW_ETAG" "$INDEX")
say "heavy's view: $VIEW_COUNT entries, ETag $VIEW_ETAG, revalidated: $STATUS"
[[ "$STATUS" == 304 ]] || { echo "the unchanged view was not a 304" >&2; exit 1; }

# ---------------------------------------------------------------- 2. 304 of a view vs nginx
mkdir -p "$TMP/www"
cp "$ROOT/Snapshots/countries.snapshot" "$TMP/www/index.json"
chmod 755 "$TMP/www"; chmod 644 "$TMP/www/index.json"
start_nginx_with "http://127.0.0.1:$NGINX_PORT/index.json" <<EOF
    server { listen 127.0.0.1:$NGINX_PORT; root $TMP/www; location / { etag on; } }
EOF
NG_URL="http://127.0.0.1:$NGINX_PORT/index.json"
NG_ETAG="$(etag_of "$NG_URL")"
WATCH_PIDS=("$DS_PID")
if ((${#MODES[@]} == 1 && JWT_ROUNDS == 1)); then
    run_wrk nginx-304 "$NG_URL" "If-None-Match: $NG_ETAG"
    run_wrk view-304 "$INDEX" "Authorization: Bearer $HEAVY_TOKEN" "If-None-Match: $VIEW_ETAG"
else
    # Each mode in turn, serve restarted with its key (the same store; the view's ETag read again).
    for round in $(seq 1 "$JWT_ROUNDS"); do
        run_wrk "nginx-304-r$round" "$NG_URL" "If-None-Match: $NG_ETAG"
        # Each round starts one mode further along, so no mode always runs first.
        ORDER=()
        for k in "${!MODES[@]}"; do ORDER+=("${MODES[$(((k + round - 1) % ${#MODES[@]}))]}"); done
        for mode in "${ORDER[@]}"; do
            kill "$DS_PID" 2>/dev/null || true; wait "$DS_PID" 2>/dev/null || true
            serve_flags "$mode"
            start_serve "$BIN" "$DB" "$DS_PORT" --rules "$TMP/rules.yaml" "${SERVE_FLAGS[@]}"
            WATCH_PIDS=("$DS_PID")
            token="$(head -1 "$TMP/tokens-$mode.txt")"
            VIEW_ETAG="$(etag_of "$INDEX" -H "Authorization: Bearer $token")"
            STATUS=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" -H "If-None-Match: $VIEW_ETAG" "$INDEX")
            [[ "$STATUS" == 304 ]] || { echo "$mode: the unchanged view answered $STATUS, not 304" >&2; cat "$TMP/serve.err" >&2; exit 1; }
            wrk -t"$THREADS" -c"$CONNECTIONS" -d2s -H "Authorization: Bearer $token" -H "If-None-Match: $VIEW_ETAG" "$INDEX" >/dev/null 2>&1 || true
            run_wrk "view-304-$mode-r$round" "$INDEX" "Authorization: Bearer $token" "If-None-Match: $VIEW_ETAG"
        done
    done
    # Part 3 with the first mode, on a fresh process as in a single-mode run.
    kill "$DS_PID" 2>/dev/null || true; wait "$DS_PID" 2>/dev/null || true
    serve_flags "$MODE"
    start_serve "$BIN" "$DB" "$DS_PORT" --rules "$TMP/rules.yaml" "${SERVE_FLAGS[@]}"
    WATCH_PIDS=("$DS_PID")
fi
kill "$NGINX_PID" 2>/dev/null || true

# ---------------------------------------------------------------- 3. many users, a changed view
say "$USERS users poll their view once"
RSS_BEFORE=$(vmrss_mb "$DS_PID")
python3 - "$DS_PORT" "$TMP/tokens.txt" <<'PY'
import http.client, sys
port, tokens = int(sys.argv[1]), open(sys.argv[2]).read().split()[1:]
connection = http.client.HTTPConnection("127.0.0.1", port)
bad = 0
for token in tokens:
    connection.request("GET", "/v1/index", headers={"Authorization": "Bearer " + token})
    response = connection.getresponse()
    response.read()
    bad += response.status != 200
if bad:
    sys.exit("%d views were not 200" % bad)
PY
RSS_AFTER=$(vmrss_mb "$DS_PID")
HWM=$(vmhwm_mb "$DS_PID")

say "a changed view: one of heavy's $VIEW_COUNT partitions changes, $REPEATS times"
: >"$TMP/changed.txt"
STEP=$((PARTITIONS / VIEW_PARTITIONS))
for i in $(seq 1 "$REPEATS"); do
    OLD="$(etag_of "$INDEX" -H "Authorization: Bearer $HEAVY_TOKEN")"
    printf '{"id":"q","question":"changed %d"}\n' "$i" | "$BIN" import --db "$DB" --collection "sets/s$(( (i % VIEW_PARTITIONS) * STEP ))" --quiet - >/dev/null
    sleep 0.3   # the server notices another process's commit within 100 ms
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -H "Authorization: Bearer $HEAVY_TOKEN" -H "If-None-Match: $OLD" "$INDEX" >>"$TMP/changed.txt"
done
grep -qv '^200 ' "$TMP/changed.txt" && { echo "a changed view was not a 200:" >&2; cat "$TMP/changed.txt" >&2; exit 1; }
CHANGED_P50=$(awk '{ print $2 * 1000 }' "$TMP/changed.txt" | sort -n | awk '{ a[NR] = $1 } END { printf "%.2f", a[int((NR + 1) / 2)] }')
CHANGED_MAX=$(awk '{ print $2 * 1000 }' "$TMP/changed.txt" | sort -n | tail -1)

# ---------------------------------------------------------------- report
get() { awk -F'\t' -v n="$1" -v c="$2" '$1 == n { print $c }' "$RESULTS"; }
echo
echo "import --partition-by (SQLite): $IMPORT_RECORDS records into $IMPORT_RECORDS partitions in $IMPORT_SECONDS s = $IMPORT_RATE records/s"
echo
echo "| case (wrk -t$THREADS -c$CONNECTIONS -d$DURATION) | req/s | p50 ms | p99 ms | ×nginx |"
echo "|---|---:|---:|---:|---:|"
if ((${#MODES[@]} == 1 && JWT_ROUNDS == 1)); then
    NG=$(get nginx-304 2)
    printf '| nginx 304 (static file) | %s | %s | %s | 1.00 |\n' "$NG" "$(get nginx-304 3)" "$(get nginx-304 4)"
    printf '| view of %s partitions, 304 (JWT %s verified) | %s | %s | %s | %s |\n' "$VIEW_COUNT" "$MODE" "$(get view-304 2)" "$(get view-304 3)" "$(get view-304 4)" \
        "$(awk -v a="$(get view-304 2)" -v b="$NG" 'BEGIN { printf "%.2f", a / b }')"
else
    FIRST="${MODES[0]}"
    for round in $(seq 1 "$JWT_ROUNDS"); do
        NG=$(get "nginx-304-r$round" 2)
        printf '| round %s: nginx 304 (static file) | %s | %s | %s | 1.00 |\n' "$round" "$NG" "$(get "nginx-304-r$round" 3)" "$(get "nginx-304-r$round" 4)"
        for mode in "${MODES[@]}"; do
            printf '| round %s: view of %s partitions, 304, JWT %s | %s | %s | %s | %s |\n' "$round" "$VIEW_COUNT" "$mode" "$(get "view-304-$mode-r$round" 2)" \
                "$(get "view-304-$mode-r$round" 3)" "$(get "view-304-$mode-r$round" 4)" "$(awk -v a="$(get "view-304-$mode-r$round" 2)" -v b="$NG" 'BEGIN { printf "%.2f", a / b }')"
        done
    done
    echo
    echo "view-304 rate of each mode ÷ $FIRST's in the same round:"
    for mode in "${MODES[@]}"; do
        printf '  %-10s' "$mode"
        for round in $(seq 1 "$JWT_ROUNDS"); do
            printf '  r%s %s' "$round" "$(awk -v a="$(get "view-304-$mode-r$round" 2)" -v b="$(get "view-304-$FIRST-r$round" 2)" 'BEGIN { printf "%.2f", a / b }')"
        done
        echo
    done
fi
echo
echo "$PARTITIONS partitions, $USERS users' views answered: server RSS $RSS_BEFORE MB before, $RSS_AFTER MB after (peak $HWM MB)"
echo "changed view (1 of $VIEW_COUNT partitions changed), $REPEATS times: p50 $CHANGED_P50 ms, max $CHANGED_MAX ms"
