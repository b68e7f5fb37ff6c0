#!/usr/bin/env bash
# The browser client's benchmark (bench/run.py) with what it needs: the module built, and
# selenium in the venv .ci/browser-tests.sh uses (created here when missing).
#   BIN=.build/release/deltasnap clients/typescript/bench/run.sh            (sync, apply, first start, files)
#   BIN=.build/release/deltasnap clients/typescript/bench/run.sh queries    (queries and live queries)
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT="$PWD"
BIN="${BIN:-$ROOT/.build/release/deltasnap}"
case "$BIN" in /*) ;; *) BIN="$ROOT/$BIN" ;; esac
VENV="$ROOT/.build/browser-venv"
[ -x "$BIN" ] || { echo "bench: $BIN is missing; build it first (or set BIN)" >&2; exit 1; }
if ! "$VENV/bin/python" -c 'import selenium' 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "selenium==4.51.0" "xxhash==4.1.0"
fi
clients/typescript/build.sh >/dev/null
# `run.sh queries`: queries and live queries (bench/queries.py) instead of sync and apply.
SCRIPT=run.py
[ "${1:-}" = queries ] && SCRIPT=queries.py
BIN="$BIN" timeout 900 "$VENV/bin/python" "clients/typescript/bench/$SCRIPT"
