#!/usr/bin/env bash
# Builds the libFuzzer driver (.build/fuzz/deltasnap-fuzz) with ASan: DeltaSnapCore's sources,
# the server's ConditionalRequest and Fuzz/FuzzTargets.swift compiled as one module.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.build/fuzz
mkdir -p "$out/src"
# One module: ConditionalRequest's `import DeltaSnapCore` would name a module that is not built.
sed '/^import DeltaSnapCore$/d' Sources/DeltaSnapServer/HTTP/ConditionalRequest.swift > "$out/src/ConditionalRequest.swift"
swiftc -sanitize=fuzzer,address -parse-as-library -O -g -module-name DeltaSnapFuzz -package-name DeltaSnap \
  -I Sources/CZlib -I Sources/CSQLite \
  Sources/DeltaSnapCore/*.swift "$out/src/ConditionalRequest.swift" Fuzz/FuzzTargets.swift \
  -o "$out/deltasnap-fuzz" 2> "$out/build.log" || { cat "$out/build.log" >&2; exit 1; }
echo "built $out/deltasnap-fuzz"
