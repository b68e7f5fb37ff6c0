#!/bin/sh
# Builds the browser client: dist/lib (ES modules + .d.ts, from tsc), dist/deltasnap.js (one
# bundled ES module, from esbuild) and dist/deltasnap.d.ts; then copies the module and the
# bundled snapshot into example/ so `deltasnap serve --static clients/typescript/example` works.
# Needs Debian's node-typescript (tsc) and esbuild.
set -eu
cd "$(dirname "$0")"
rm -rf dist
tsc -p .
esbuild dist/lib/index.js --bundle --format=esm --target=es2022 --outfile=dist/deltasnap.js --log-level=warning
printf 'export * from "./lib/index.js";\n' > dist/deltasnap.d.ts
cp dist/deltasnap.js example/deltasnap.js
cp ../../Snapshots/countries.snapshot example/countries.snapshot
echo "built clients/typescript/dist/deltasnap.js ($(wc -c < dist/deltasnap.js) bytes)"
