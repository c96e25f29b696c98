#!/usr/bin/env bash
# End-to-end latency: every service (release build) and the APNs simulator as processes on a fresh
# broker, domain events produced at a steady rate to many activities, and the time from producing
# each event to the simulator receiving its push: p50/p90/p99 (Tools/IsletDemo, `latency`).
#
#   scripts/bench-e2e.sh                         # 1,000 events/s for 30 s over 2,000 activities
#   scripts/bench-e2e.sh --rate 500 --seconds 60
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ISLET_BUILD_CONFIGURATION=release ISLET_LOG_LEVEL=${ISLET_LOG_LEVEL:-warning} exec scripts/demo.sh --latency "$@"
