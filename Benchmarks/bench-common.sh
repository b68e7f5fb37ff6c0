# Shared by bench-http.sh and bench-memory.sh (sourced, not run): the release binary, a
# temporary directory, and a cleanup that stops every process they started, by PID.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/.build/release/deltasnap"
COLLECTION=items
PIDS=()

say() { printf '== %s\n' "$*" >&2; }

# Installs the Debian packages whose commands are missing.
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
