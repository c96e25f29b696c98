#!/usr/bin/env bash
# Memory per live activity: every service (release build) and the APNs simulator as processes on
# a fresh broker; 100,000 activities registered with token-registry and sent one important event
# each; the resident memory of apns-dispatcher and content-service before and after, and the growth
# per activity (Tools/IsletDemo, `memory`). Its last lines are `memory<TAB>service<TAB>bytes per
# activity<TAB>RSS before<TAB>RSS after`.
#
# It also prints how long the services' token tables took to hold every token, and where the
# events went (content-service's results, the dispatcher's final outcomes).
#
#   scripts/bench-memory.sh                      # 100,000 activities, 256 registrations at a time, 1,500 events/s
#   scripts/bench-memory.sh --activities 20000
#
# The registrations are a bulk load, so the services' producers linger 50 ms and batch them. On the
# local broker this matters: tansu's cost of reading a partition grows with the number of batches
# in it, faster than linearly, and 100,000 registrations written one record per batch took 987 s
# while the services' token tables fell minutes behind (docs/operations.md, scripts/broker-batches.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export ISLET_KAFKA_PRODUCER_PROPERTIES=${ISLET_KAFKA_PRODUCER_PROPERTIES:-linger.ms=50}
ISLET_BUILD_CONFIGURATION=release ISLET_LOG_LEVEL=${ISLET_LOG_LEVEL:-warning} exec scripts/demo.sh --memory "$@"
