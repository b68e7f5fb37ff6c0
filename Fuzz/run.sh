#!/usr/bin/env bash
# Runs each fuzz target for FUZZ_SECONDS (default 30) on a copy of its seed corpus; a crash or
# a broken invariant fails the run and leaves the input in .build/fuzz/artifacts/.
# FUZZ_SEEDS_ONLY=1 replays the committed seeds once and mutates nothing: deterministic, for CI.
# Usage: Fuzz/run.sh [target …]   (default: all targets)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-30}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(json record body gzip httpdate conditional)
Fuzz/build.sh
mkdir -p .build/fuzz/artifacts
for target in "${targets[@]}"; do
  corpus=.build/fuzz/corpus/$target
  limits=(-max_total_time="$seconds")
  how="for ${seconds}s"
  if [ -n "${FUZZ_SEEDS_ONLY:-}" ]; then
    corpus=.build/fuzz/seeds/$target
    rm -rf "$corpus"
    limits=(-runs=0)
    how="over its seeds"
  fi
  mkdir -p "$corpus"
  cp -n Fuzz/corpus/"$target"/* "$corpus"/ 2>/dev/null || true
  # The baked snapshots are real gzip seeds (made by `make snapshots`, not copied here).
  if [ "$target" = gzip ]; then cp -n Snapshots/*.snapshot "$corpus"/ 2>/dev/null || true; fi
  echo "fuzz: $target $how"
  # No Swift backtracer on a crash: libFuzzer reports it, and the backtracer can stall the run.
  log=.build/fuzz/$target.log
  status=0
  SWIFT_BACKTRACE=enable=no DELTASNAP_FUZZ_TARGET=$target timeout $((seconds + 60)) .build/fuzz/deltasnap-fuzz "$corpus" "${limits[@]}" \
    -max_len=65536 -rss_limit_mb=2048 -artifact_prefix=.build/fuzz/artifacts/"$target"- -print_final_stats=1 > "$log" 2>&1 || status=$?
  grep -E "^#[0-9]+ +DONE|stat::number_of_executed_units|ERROR|invariant broken|SUMMARY|Test unit written" "$log" || true
  if [ "$status" -ne 0 ] || ls .build/fuzz/artifacts/"$target"-* >/dev/null 2>&1; then
    echo "fuzz: $target FAILED; inputs in .build/fuzz/artifacts/" >&2
    exit 1
  fi
done
echo "fuzz: ${#targets[@]} target(s) ran ${how/its/their} without a crash"
