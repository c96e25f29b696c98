# shellcheck shell=bash
# The start the benchmark scripts (bench-kafka.sh, bench-registry.sh, bench-dispatcher.sh,
# bench-content.sh, bench-analytics.sh) share. Sourced right after `set -euo pipefail`, never run:
#
#   # shellcheck source=scripts/lib-bench.sh
#   . "$(dirname "${BASH_SOURCE[0]}")/lib-bench.sh"
#
# Unlike lib.sh it acts: it sets `repo` (the checkout) and makes it the working directory, sources
# lib.sh, exports ISLET_RUN_DIR (default .islet-run) and creates it, and runs scripts/bootstrap.sh.
# Then the script builds what it runs: the services with build_release (bin=$(swift build -c release
# --show-bin-path)), the benchmark executables with build_benchmarks (bench_bin=$(benchmarks_bin)).
# The processes it starts it adds to `pids` (pids+=("$!")): they are stopped when it exits, however
# it exits (bench-kafka.sh and bench-content.sh, one broker at a time, set traps of their own).

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$repo/scripts/lib.sh"
cd "$repo"
export ISLET_RUN_DIR=${ISLET_RUN_DIR:-$repo/.islet-run}
mkdir -p "$ISLET_RUN_DIR"
scripts/bootstrap.sh

pids=()
stop_started() { stop_pids "${pids[@]}"; pids=(); }
trap stop_started EXIT INT TERM

# wrk and curl (Debian's), installed when either is missing.
need_wrk() {
  if ! command -v wrk >/dev/null || ! command -v curl >/dev/null; then
    as_root apt-get install -y -q wrk curl >/dev/null
  fi
}
