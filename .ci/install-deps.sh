#!/usr/bin/env bash
# Installs the Debian packages DeltaSnap builds against, when they are missing.
# Used by every Makefile target, so a fresh machine needs no manual step.
set -euo pipefail
# wrk drives the soak test (make test runs a short one); python3-venv holds schemathesis;
# nginx is the shared cache the CDN test puts in front of the server; postgresql the server
# the PostgreSQL store's tests run a throwaway cluster of (initdb on a free loopback port).
# nodejs, node-typescript and esbuild build the browser client (clients/typescript; no npm registry: Debian's npm only packs it).
packages=(zlib1g-dev libsqlite3-dev pkg-config wrk curl python3-venv nginx postgresql nodejs node-typescript esbuild)
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "Installing ${missing[*]}…" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [[ " ${missing[*]} " == *" postgresql "* ]] && [ ! -e /etc/postgresql-common/createcluster.conf ]; then
  # Only the binaries: no system-wide "main" cluster left running on port 5432 (the tests
  # start, and stop, their own).
  $sudo mkdir -p /etc/postgresql-common
  echo "create_main_cluster = false" | $sudo tee /etc/postgresql-common/createcluster.conf >/dev/null
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -o Dpkg::Options::=--force-confold "${missing[@]}"
