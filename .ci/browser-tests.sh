#!/usr/bin/env bash
# The browser client (clients/typescript) held to the protocol, in a real browser:
#   1. builds the package (clients/typescript/package.json) with Debian's tsc and esbuild
#      (nothing is downloaded for the client itself: it has no dependencies);
#   2. `node --test --experimental-test-coverage`: the shared protocol vectors
#      (Tests/Fixtures/protocol-vectors.json), body parsing, the merge rule, the fallback
#      ladder and backoff; the store contract on the in-memory store and on IndexedDB (a
#      test double of it); the sync engine, replicas, tabs, live mode and views against a real
#      `deltasnap serve` ($BIN) on loopback; `npm pack` → an offline `npm install` of the
#      tarball into a scratch project → both entry points imported and type-checked. Then
#      every runtime module (src/runtime/*.ts) must have at least 80 % (MIN_COVERAGE) line
#      coverage from these node tests, or the run fails;
#   3. end to end in headless Chromium driven by Selenium: the harness
#      (clients/typescript/e2e/test_browser.py) starts `deltasnap serve --static
#      clients/typescript/example` on a free loopback port, a fault-injecting proxy in front
#      of it, and Chromium; it stops and restarts the server itself (the offline-edit test).
#      A screenshot of the example page lands in .build/browser-artifacts/example.png, one of
#      the notes example (photos, opened offline from its service worker) in notes-offline.png;
#   4. the operator's console (clients/console, served by `serve --console`): its embedded files
#      are current, and in Chromium an operator signs in, finds a partition among 100,000 and
#      approves a review through the page (console-diff.png).
# Missing tools are installed: apt (nodejs, node-typescript, esbuild, chromium,
# chromium-driver, python3-venv, and npm where nodejs does not bring it) and PyPI
# (selenium, xxhash) into a venv under .build/.
# Nothing is skipped: a missing tool that cannot be installed fails the run.
#
#   BIN=.build/debug/deltasnap .ci/browser-tests.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BIN="${BIN:-$ROOT/.build/debug/deltasnap}"
case "$BIN" in /*) ;; *) BIN="$ROOT/$BIN" ;; esac
VENV="$ROOT/.build/browser-venv"
ARTIFACTS="$ROOT/.build/browser-artifacts"
# The harness's stores, keys, browser profile and logs; removed after every run.
E2E_TMP="$ROOT/.build/browser-tmp"
SELENIUM_VERSION=4.51.0
XXHASH_VERSION=4.1.0
# Bounds, so CI fails rather than hangs (the whole run takes about a minute on 2 cores).
E2E_TIMEOUT="${E2E_TIMEOUT:-360}"
UNIT_TIMEOUT="${UNIT_TIMEOUT:-300}"
CONSOLE_TIMEOUT="${CONSOLE_TIMEOUT:-180}"
# Line coverage each runtime module must reach from the node tests alone.
MIN_COVERAGE="${MIN_COVERAGE:-80}"

[ -x "$BIN" ] || { echo "browser-tests: $BIN is missing; run 'swift build' first (or set BIN)" >&2; exit 1; }

HARNESS_PID=""
cleanup() {
    # The harness runs in its own process group (setsid, so the group's id is its PID): the
    # server, the proxy, chromedriver and Chromium it started go with the group, even when
    # `timeout` killed the harness before it could stop them itself.
    if [ -n "$HARNESS_PID" ] && kill -0 -- "-$HARNESS_PID" 2>/dev/null; then
        kill -TERM -- "-$HARNESS_PID" 2>/dev/null || true
        sleep 1
        kill -KILL -- "-$HARNESS_PID" 2>/dev/null || true
    fi
    HARNESS_PID=""
    rm -rf "$E2E_TMP"
}
trap cleanup EXIT

missing=()
for package in nodejs node-typescript esbuild chromium chromium-driver python3-venv; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
# nodesource's nodejs, for one, is not Debian's package but provides node: accept any node ≥ 18.
install_packages() {
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "browser-tests: installing $*"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@"
}
[ "${#missing[@]}" -eq 0 ] || install_packages "${missing[@]}"
# Debian's nodejs comes without npm (its own package); nodesource's brings it (and conflicts with it).
command -v npm >/dev/null || install_packages npm
for tool in node npm tsc esbuild chromium chromedriver; do
    command -v "$tool" >/dev/null || { echo "browser-tests: '$tool' is still missing after installing packages" >&2; exit 1; }
done
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)' \
    || { echo "browser-tests: node $(node --version) is too old; node --test needs 18 or later" >&2; exit 1; }

# grep without -q reads pip's whole output: with pipefail, -q's early exit fails the pipe.
if ! "$VENV/bin/pip" show selenium 2>/dev/null | grep "^Version: $SELENIUM_VERSION" >/dev/null \
    || ! "$VENV/bin/pip" show xxhash 2>/dev/null | grep "^Version: $XXHASH_VERSION" >/dev/null; then
    echo "browser-tests: installing selenium $SELENIUM_VERSION and xxhash $XXHASH_VERSION into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "selenium==$SELENIUM_VERSION" "xxhash==$XXHASH_VERSION"
fi

echo "browser-tests: building clients/typescript"
clients/typescript/build.sh

echo "browser-tests: node --test (protocol vectors; stores; sync engine, replicas, tabs, views against deltasnap serve; npm pack and install)"
mkdir -p "$ARTIFACTS"
NODE_LOG="$ARTIFACTS/node-tests.txt"
# From the package's folder, so the coverage table names dist/lib/runtime/*.js.
(cd clients/typescript && DELTASNAP_BIN="$BIN" timeout "$UNIT_TIMEOUT" node --test --experimental-test-coverage test/*.test.mjs) 2>&1 | tee "$NODE_LOG"

echo "browser-tests: line coverage of each runtime module by the node tests (at least ${MIN_COVERAGE}%)"
under=0
for source in clients/typescript/src/runtime/*.ts; do
    module=$(basename "$source" .ts)
    # node 18/20 print "# dist/lib/runtime/NAME.js | line % | …"; later ones nest the folders ("# NAME.js | …").
    percent=$(grep -E "[ /]${module}\.js +\|" "$NODE_LOG" | head -1 | awk -F'|' '{ gsub(/ /, "", $2); print $2 }')
    if [ -z "$percent" ]; then
        printf '  %-16s no coverage line: no node test loads it\n' "$module"
        under=1
    elif awk -v p="$percent" -v min="$MIN_COVERAGE" 'BEGIN { exit !(p + 0 < min + 0) }'; then
        printf '  %-16s %6s%%  UNDER %s%%\n' "$module" "$percent" "$MIN_COVERAGE"
        under=1
    else
        printf '  %-16s %6s%%\n' "$module" "$percent"
    fi
done
[ "$under" -eq 0 ] || { echo "browser-tests: FAILED: a runtime module has under ${MIN_COVERAGE}% line coverage from node --test" >&2; exit 1; }

echo "browser-tests: headless Chromium against deltasnap serve ($BIN)"
rm -f "$ARTIFACTS/example.png" "$ARTIFACTS/notes-offline.png"
rm -rf "$E2E_TMP" && mkdir -p "$E2E_TMP"
set +e
BIN="$BIN" REPO="$ROOT" ARTIFACTS="$ARTIFACTS" TMPDIR="$E2E_TMP" setsid timeout "$E2E_TIMEOUT" \
    "$VENV/bin/python" -W ignore::ResourceWarning clients/typescript/e2e/test_browser.py &
HARNESS_PID=$!
wait "$HARNESS_PID"
status=$?
set -e
cleanup
if [ "$status" -ne 0 ]; then
    [ "$status" -eq 124 ] && echo "browser-tests: the browser tests took longer than ${E2E_TIMEOUT}s" >&2
    echo "browser-tests: FAILED (exit $status)" >&2
    exit "$status"
fi
[ -s "$ARTIFACTS/example.png" ] || { echo "browser-tests: no screenshot was taken" >&2; exit 1; }

# The operator's console (serve --console): its embedded files are what clients/console builds,
# and it works in Chromium (sign in, a partition among 100,000, a review approved through the page).
echo "browser-tests: the console (clients/console) is built into the server as committed"
mkdir -p "$E2E_TMP"
cp Sources/DeltaSnapServer/ConsoleAssets.swift "$E2E_TMP/ConsoleAssets.committed.swift"
clients/console/build.sh
if ! cmp -s Sources/DeltaSnapServer/ConsoleAssets.swift "$E2E_TMP/ConsoleAssets.committed.swift"; then
    cp "$E2E_TMP/ConsoleAssets.committed.swift" Sources/DeltaSnapServer/ConsoleAssets.swift
    echo "browser-tests: FAILED: Sources/DeltaSnapServer/ConsoleAssets.swift is stale: run clients/console/build.sh and commit it" >&2
    exit 1
fi
echo "browser-tests: the console in headless Chromium against deltasnap serve --console"
rm -f "$ARTIFACTS/console-diff.png"
set +e
BIN="$BIN" ARTIFACTS="$ARTIFACTS" TMPDIR="$E2E_TMP" setsid timeout "$CONSOLE_TIMEOUT" \
    "$VENV/bin/python" -W ignore::ResourceWarning clients/console/e2e/test_console.py &
HARNESS_PID=$!
wait "$HARNESS_PID"
status=$?
set -e
cleanup
[ "$status" -eq 0 ] || { echo "browser-tests: the console tests FAILED (exit $status)" >&2; exit "$status"; }
[ -s "$ARTIFACTS/console-diff.png" ] || { echo "browser-tests: no screenshot of the console's diff view was taken" >&2; exit 1; }
[ -s "$ARTIFACTS/notes-offline.png" ] || { echo "browser-tests: no screenshot of the notes example offline was taken" >&2; exit 1; }
echo "browser-tests: passed; screenshots in ${ARTIFACTS#$ROOT/}/ (example.png, notes-offline.png, console-diff.png)"
