#!/usr/bin/env bash
# Runs the unit and integration tests under a sanitizer: ThreadSanitizer (data races) or
# AddressSanitizer (out-of-bounds accesses, use after free). Builds in a directory of its own
# (.build-thread, .build-address: the instrumented build does not disturb the normal one), starts a
# broker as scripts/test.sh does, runs `swift test` with ISLET_REQUIRE_BROKER=1 and prints every
# sanitizer report's summary line. Fails if a test fails or the sanitizer reported anything.
# Extra arguments go to `swift test` (e.g. --filter EngineTests).
#
#   scripts/sanitize.sh thread
#   scripts/sanitize.sh address --filter APNsTests
#
# A full instrumented build takes 15 to 25 minutes on 2 cores; the test log is kept in
# $ISLET_RUN_DIR/sanitize-<kind>.log.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$repo/scripts/lib.sh"
cd "$repo"
kind=${1:-}
case "$kind" in
  thread | address) shift ;;
  *) echo "usage: scripts/sanitize.sh thread|address [swift test arguments…]" >&2; exit 2 ;;
esac
export ISLET_RUN_DIR=${ISLET_RUN_DIR:-$repo/.islet-run}
mkdir -p "$ISLET_RUN_DIR"
scratch=".build-$kind"
log="$ISLET_RUN_DIR/sanitize-$kind.log"

scripts/bootstrap.sh

seconds() { date +%s; }
began=$(seconds)
echo "== build (--sanitize=$kind, in $scratch)"
swift build --build-tests --sanitize="$kind" --scratch-path "$scratch"
built=$(seconds)

echo "== broker"
eval "$(scripts/broker.sh)"
export ISLET_KAFKA_BOOTSTRAP
stop_broker() { stop_pids "$ISLET_BROKER_PID"; }
trap stop_broker EXIT INT TERM
echo "tansu on $ISLET_KAFKA_BOOTSTRAP (pid $ISLET_BROKER_PID)"
export ISLET_REQUIRE_BROKER=1

# ThreadSanitizer keeps going after a report and makes the process exit 66 at the end;
# AddressSanitizer stops the test process at its first report.
if [ "$kind" = thread ]; then
  # Shows the sanitizer librdkafka's C11 threads and Synchronization.Mutex's contended paths, which
  # it cannot see by itself (a crash and false races without it): see the file's comment.
  clang -shared -fPIC -O2 -o "$ISLET_RUN_DIR/tsan-preload.so" scripts/tsan-preload.c -ldl -lpthread
  export LD_PRELOAD="$ISLET_RUN_DIR/tsan-preload.so${LD_PRELOAD:+:$LD_PRELOAD}"
  # Known reports in third-party code that are not races are listed, with reasons, in the file.
  export TSAN_OPTIONS="suppressions=$repo/scripts/tsan-suppressions.txt${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
else
  # LeakSanitizer runs at exit; known third-party leaks are listed, with reasons, in the file.
  export LSAN_OPTIONS="suppressions=$repo/scripts/lsan-suppressions.txt${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
fi
echo "== tests (--sanitize=$kind; log in $log)"
set +e
swift test --skip-build --sanitize="$kind" --scratch-path "$scratch" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
finished=$(seconds)

reports=$(grep -cE '^(WARNING: ThreadSanitizer|==[0-9]+==ERROR: AddressSanitizer|==[0-9]+==ERROR: LeakSanitizer)' "$log" || true)
echo "== sanitize $kind: swift test exited $status; $reports sanitizer report(s); build $((built - began)) s, tests $((finished - built)) s"
grep -E '^SUMMARY: (ThreadSanitizer|AddressSanitizer|LeakSanitizer)' "$log" | sort | uniq -c | sort -rn || true
[ "$status" -eq 0 ] && [ "$reports" -eq 0 ]
