#!/usr/bin/env bash
# Fuzzes every parser that takes outside input with libFuzzer, for a bounded time each: built with
# swiftc -sanitize=fuzzer in a build directory of its own (.build-fuzz; ISLET_FUZZ=1 makes
# Package.swift add the fuzz targets), each target checking the properties of its enum in
# Fuzz/Checks. A failing input (a crash, a broken property, a timeout, out of memory) is copied to
# Fuzz/<folder>/regressions/ — commit it: FuzzTests replays those folders in every `swift test` —
# and the script fails once every target has run.
#
#   scripts/fuzz.sh                   # every target, 60 s each
#   scripts/fuzz.sh 8                 # every target, 8 s each (scripts/test.sh)
#   scripts/fuzz.sh 600 apns ingest   # two targets, 10 minutes each
#
# Targets (Fuzz/<folder>):
#   links     LinkParser       the widget-link parser (DeepLinkCodec.verify)
#   registry  RegistryBodies   token-registry's HTTP bodies, decoded and validated
#   ingest    IngestBodies     analytics-ingest's HTTP bodies (one tap, a batch), each tap verified
#   messages  TopicMessages    every topic's message type, read as consumers read records
#   apns      APNsAnswers      apns-dispatcher's reading of APNs answers (reason, 410 timestamp)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
seconds=${1:-60}
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "usage: scripts/fuzz.sh [seconds-per-target] [target…]" >&2; exit 2; }
[ "$#" -gt 0 ] && shift
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(links registry ingest messages apns)

# The folder of a target, and the longest input worth trying (its service's own limit, or a
# little over a typical body).
folder() {
  case "$1" in
    links) echo LinkParser ;;
    registry) echo RegistryBodies ;;
    ingest) echo IngestBodies ;;
    messages) echo TopicMessages ;;
    apns) echo APNsAnswers ;;
    *) echo "unknown fuzz target $1 (links, registry, ingest, messages, apns)" >&2; return 1 ;;
  esac
}
max_len() {
  case "$1" in
    links) echo 4300 ;;      # DeepLinkCodec refuses URLs over 4096 bytes
    registry) echo 8192 ;;   # token-registry's default body limit
    ingest) echo 16384 ;;    # a few dozen taps
    messages) echo 8192 ;;   # a push request with a 4 KB payload
    apns) echo 4200 ;;       # the dispatcher keeps about 4 KB of an error body
  esac
}
for target in "${targets[@]}"; do folder "$target" >/dev/null; done

export ISLET_RUN_DIR=${ISLET_RUN_DIR:-$repo/.islet-run}
mkdir -p "$ISLET_RUN_DIR/fuzz"
build_log="$ISLET_RUN_DIR/fuzz/build.log"
: >"$build_log"
export ISLET_FUZZ=1  # Package.swift adds the fuzz targets and instruments the parsers' modules
for target in "${targets[@]}"; do
  swift build --build-path .build-fuzz --product "islet-$target-fuzz" >>"$build_log" 2>&1 || {
    grep -E "error|warning: " "$build_log" | head -40
    echo "the fuzz build failed; its log: $build_log"
    exit 1
  }
done
bin=$(swift build --build-path .build-fuzz --show-bin-path)

failed=()
for target in "${targets[@]}"; do
  dir=Fuzz/$(folder "$target")
  work="$ISLET_RUN_DIR/fuzz/$target"
  mkdir -p "$work/corpus" "$work/artifacts"
  rm -f "$work/artifacts/"crash-* "$work/artifacts/"timeout-* "$work/artifacts/"oom-*
  set +e
  # New inputs go to the first folder (the working corpus), never to the committed seeds.
  # SWIFT_BACKTRACE=enable=no: a trap must reach libFuzzer's handler, which saves the input.
  SWIFT_BACKTRACE=enable=no "$bin/islet-$target-fuzz" "$work/corpus" "$dir/seeds" "$dir/regressions" \
    -dict="$dir/dictionary" -max_total_time="$seconds" -max_len="$(max_len "$target")" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" >"$work/fuzz.log" 2>&1
  status=$?
  set -e
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz.log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/fuzz.log")
  corpus=$(find "$work/corpus" -type f | wc -l)
  found=$(find "$work/artifacts" -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \))
  if [ -n "$found" ] || [ "$status" -ne 0 ]; then
    for file in $found; do cp "$file" "$dir/regressions/"; echo "$target: saved $(basename "$file") to $dir/regressions/"; done
    echo "$target: FAILED (exit $status) after ${runs:-?} runs; the log: $work/fuzz.log"
    grep -E "^(==[0-9]+==|SUMMARY|.*Fatal error|.*Precondition failed)" "$work/fuzz.log" | head -10 || true
    failed+=("$target")
  else
    echo "$target: ${runs:-?} runs in ${seconds} s (${rate:-?}/s), no failure; corpus $corpus inputs in $work/corpus"
  fi
done

if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzzing found failing inputs in: ${failed[*]} (commit what was saved to Fuzz/*/regressions/ with the fix)"
  exit 1
fi
