#!/usr/bin/env bash
# Memory per live activity: every service (release build) and the APNs simulator as processes on
# a fresh broker; 100,000 activities registered with token-registry and sent one important event
# each; the resident memory of apns-dispatcher and content-service before and after, and the growth
# per activity (Tools/IsletDemo, `memory`). Its last lines are `memory<TAB>service<TAB>bytes per
# activity<TAB>RSS before<TAB>RSS after`.
#
#   scripts/bench-memory.sh                      # 100,000 activities, 1,500 events/s
#   scripts/bench-memory.sh --activities 20000
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ISLET_BUILD_CONFIGURATION=release ISLET_LOG_LEVEL=${ISLET_LOG_LEVEL:-warning} exec scripts/demo.sh --memory "$@"
