#!/usr/bin/env bash
# Two instances of content-service and of apns-dispatcher at scale, through the product's own paths
# (issue 24): every service (release build) and the APNs simulator as processes on a fresh broker,
# with a second content-service and a second apns-dispatcher in the same consumer groups; ACTIVITIES
# activities registered through token-registry's API, one event each through Kafka; each instance's
# resident memory and the activities it holds (content-service: its live activities; the
# dispatcher: its partitions' tokens); then a kill -9 of the first instance of each and the time
# until the survivors hold every activity; then a second event each, and whether every activity's
# two contents reached the simulator exactly once (Benchmarks/Stack/Scale.swift). Its last line is
# `RESULT scale-stack activities=… content-1_held=… … latest_once=… received_twice=…`.
#
#   scripts/bench-scale-stack.sh                       # 100,000 activities, 1,500 events/s
#   scripts/bench-scale-stack.sh --activities 20000
#
# Bounds: each wait gives up when nothing moved for 120 s (--stall-seconds). scripts/bench-scale.sh
# measures the same state at 1,000,000 activities loaded straight onto the topics (the API and the
# local broker take about 4 minutes per million registrations and 11 per million events here).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export ISLET_KAFKA_PRODUCER_PROPERTIES=${ISLET_KAFKA_PRODUCER_PROPERTIES:-linger.ms=50}
export MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX:-2}
# At a million activities the run lasts longer than the templates' stale windows (3 minutes): the
# freshness monitor would re-send the content of every activity gone stale, and end those stale
# for 10 minutes, and the check that each content arrived exactly once would count those pushes.
# So no re-sends, and "severely stale" only after 8 hours, unless the environment says otherwise.
export ISLET_FRESHNESS_RESENDS=${ISLET_FRESHNESS_RESENDS:-0}
export ISLET_FRESHNESS_SEVERE_SECONDS=${ISLET_FRESHNESS_SEVERE_SECONDS:-28800}
# The simulator keeps every push of the run (two per activity), which the check reads back.
activities=100000
args=("$@")
for i in "${!args[@]}"; do
  case "${args[$i]}" in
    --activities) activities=${args[$((i + 1))]:-$activities} ;;
    --activities=*) activities=${args[$i]#--activities=} ;;
  esac
done
export ISLET_SIMULATOR_RECORD_CAPACITY=${ISLET_SIMULATOR_RECORD_CAPACITY:-$((2 * activities + 10000))}
ISLET_BUILD_CONFIGURATION=release ISLET_LOG_LEVEL=${ISLET_LOG_LEVEL:-warning} exec scripts/demo.sh --scale "$@"
