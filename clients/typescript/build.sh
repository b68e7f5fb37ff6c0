#!/bin/sh
# Builds the browser client (the npm package `deltasnap`, package.json) with Debian's tsc and
# esbuild:
#   dist/lib/        ES modules + complete .d.ts declarations, from tsc: index.js (the app
#                    API, the package's "."), protocol.js ("./protocol"), protocol/*
#                    (wire-level, pure) and runtime/* (storage, sync, tabs, views);
#   dist/deltasnap.js  the app API as one bundled ES module (esbuild), with dist/deltasnap.d.ts,
#                    for apps that copy it into their static files — with dist/download-worker.js
#                    beside it, the worker that downloads files into OPFS (without it the
#                    page downloads them itself, about half as fast);
# then copies the bundle and the bundled snapshot into example/ so
# `deltasnap serve --static clients/typescript/example` works. `npm pack` (no registry
# needed) packs dist/ into an installable tarball.
set -eu
cd "$(dirname "$0")"
rm -rf dist
tsc -p .
esbuild dist/lib/index.js --bundle --format=esm --target=es2022 --outfile=dist/deltasnap.js --log-level=warning
printf 'export * from "./lib/index.js";\n' > dist/deltasnap.d.ts
# The download worker beside the bundle (deltasnap.js starts it as ./download-worker.js); in
# dist/lib it is tsc's dist/lib/worker/download-worker.js, beside its page side.
esbuild dist/lib/worker/download-worker.js --bundle --format=esm --target=es2022 --outfile=dist/download-worker.js --log-level=warning
cp dist/deltasnap.js dist/download-worker.js example/
cp ../../Snapshots/countries.snapshot example/countries.snapshot
echo "built clients/typescript/dist/deltasnap.js ($(wc -c < dist/deltasnap.js) bytes)"
