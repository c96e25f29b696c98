#!/usr/bin/env bash
# The deterministic simulation of the delivery contract (Tests/SimulationTests; docs/operations.md,
# "The delivery contract"), on its own: more seeds than CI runs, or one seed replayed with its trace.
#
#   scripts/simulate.sh                    5,000 seeds from seed 1 (what CI runs)
#   scripts/simulate.sh --seeds 50000      more seeds
#   scripts/simulate.sh --from 90001       seeds from another first seed
#   scripts/simulate.sh --seed 123 [--verbose]   one seed: its summary, its violations, and with
#                                          --verbose every event of the run
# A failing seed prints its summary, the invariants it broke and the run's last events.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
filter="SimulationTests/seeds"
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) export ISLET_SIM_SEEDS="$2"; shift 2 ;;
    --from) export ISLET_SIM_FIRST_SEED="$2"; shift 2 ;;
    --seed) export ISLET_SIM_SEED="$2"; filter="SimulationTests/one"; shift 2 ;;
    --verbose) export ISLET_SIM_VERBOSE=1; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
swift build --build-tests
swift test --skip-build --filter "$filter"
