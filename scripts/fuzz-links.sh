#!/usr/bin/env bash
# Fuzzes the widget-link parser (IsletLinks.DeepLinkCodec.verify) with libFuzzer for a bounded
# time: swiftc -sanitize=fuzzer, in a build directory of its own (.build-fuzz), with the
# properties of Fuzz/LinkChecks. A crashing input is copied to Fuzz/LinkParser/regressions/
# (commit it: IsletLinksTests replays that folder) and the script fails.
#
#   scripts/fuzz-links.sh          # 60 s
#   scripts/fuzz-links.sh 25       # scripts/test.sh runs this
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
seconds=${1:-60}
export ISLET_RUN_DIR=${ISLET_RUN_DIR:-$repo/.islet-run}
work="$ISLET_RUN_DIR/fuzz-links"
mkdir -p "$work/corpus" "$work/artifacts"

export ISLET_FUZZ=1  # Package.swift adds the fuzz target and instruments IsletLinks
swift build --build-path .build-fuzz --product islet-links-fuzz >"$work/build.log" 2>&1 || { grep -E "error|warning: " "$work/build.log" | head -40; echo "the fuzz build failed; its log: $work/build.log"; exit 1; }
bin=$(swift build --build-path .build-fuzz --show-bin-path)

rm -f "$work/artifacts/"crash-* "$work/artifacts/"timeout-* "$work/artifacts/"oom-*
set +e
# SWIFT_BACKTRACE=enable=no: a trap must reach libFuzzer's handler, which saves the input.
SWIFT_BACKTRACE=enable=no "$bin/islet-links-fuzz" "$work/corpus" Fuzz/LinkParser/seeds Fuzz/LinkParser/regressions \
  -max_total_time="$seconds" -max_len=4300 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" >"$work/fuzz.log" 2>&1
status=$?
set -e
grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/fuzz.log" || true
found=$(find "$work/artifacts" -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \))
if [ -n "$found" ] || [ "$status" -ne 0 ]; then
  for file in $found; do cp "$file" Fuzz/LinkParser/regressions/; echo "saved $(basename "$file") to Fuzz/LinkParser/regressions/"; done
  echo "the link fuzzer found a failing input (exit $status); the log: $work/fuzz.log"
  tail -40 "$work/fuzz.log"
  exit 1
fi
echo "link fuzzer: no failure in ${seconds} s (corpus in $work/corpus)"
