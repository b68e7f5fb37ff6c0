#!/usr/bin/env bash
# Installs the Debian packages DeltaSnap builds against, when they are missing.
# Used by every Makefile target, so a fresh machine needs no manual step.
set -euo pipefail
# wrk drives the soak test (make test runs a short one); python3-venv holds schemathesis;
# nginx is the shared cache the CDN test puts in front of the server.
packages=(zlib1g-dev libsqlite3-dev pkg-config wrk curl python3-venv nginx)
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "Installing ${missing[*]}…" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
