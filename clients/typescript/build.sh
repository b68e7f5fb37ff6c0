#!/bin/sh
# Builds the browser client (the npm package `deltasnap`, package.json) with Debian's tsc and
# esbuild:
#   dist/lib/        ES modules + complete .d.ts declarations, from tsc: index.js (the app
#                    API, the package's "."), protocol.js ("./protocol"), protocol/*
#                    (wire-level, pure) and runtime/* (storage, sync, tabs, views);
#   dist/deltasnap.js  the app API as one bundled ES module (esbuild), with dist/deltasnap.d.ts,
#                    for apps that copy one file into their static files;
# then copies the bundle and the bundled snapshot into example/ so
# `deltasnap serve --static clients/typescript/example` works. `npm pack` (no registry
# needed) packs dist/ into an installable tarball.
set -eu
cd "$(dirname "$0")"
rm -rf dist
tsc -p .
esbuild dist/lib/index.js --bundle --format=esm --target=es2022 --outfile=dist/deltasnap.js --log-level=warning
printf 'export * from "./lib/index.js";\n' > dist/deltasnap.d.ts
cp dist/deltasnap.js example/deltasnap.js
cp ../../Snapshots/countries.snapshot example/countries.snapshot
echo "built clients/typescript/dist/deltasnap.js ($(wc -c < dist/deltasnap.js) bytes)"
