#!/usr/bin/env bash
# End-to-end latency: every service (release build) and the APNs simulator as processes on a fresh
# broker, domain events produced at a steady rate to many activities, and the time from producing
# each event to the simulator receiving its push: p50/p90/p99 (Tools/IsletDemo, `latency`).
#
# Its reference, measured first in the same run: one Kafka hop on a fresh broker of the same kind,
# librdkafka's own rdkafka_performance in latency mode (a producer stamping each message, a consumer
# reading the stamp) at the same rate with the services' settings — idempotent, acks=all,
# linger.ms=5, fetch.wait.max.ms=10. The product's path has two such hops (event → content-service,
# push request → apns-dispatcher), plus the services' work and the HTTP/2 send.
#
#   scripts/bench-e2e.sh                         # 1,000 events/s for 30 s over 2,000 activities
#   scripts/bench-e2e.sh --rate 500 --seconds 60
#   HOP_RATE=1000 HOP_SECONDS=20 scripts/bench-e2e.sh   # the reference's rate and length
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
export ISLET_RUN_DIR=${ISLET_RUN_DIR:-$repo/.islet-run}
hop_rate=${HOP_RATE:-1000}
hop_count=$((hop_rate * ${HOP_SECONDS:-20}))
rdperf=${ISLET_TOOLS:-$repo/.tools}/bin/rdkafka_performance

scripts/bootstrap.sh
echo "== reference: one Kafka hop (rdkafka_performance -l, $hop_count messages of 300 bytes at $hop_rate/s, a fresh broker)"
hop_dir=$ISLET_RUN_DIR/bench-e2e-hop
rm -rf "$hop_dir" && mkdir -p "$hop_dir"
eval "$(ISLET_RUN_DIR="$hop_dir" scripts/broker.sh)"
hop_pids=("$ISLET_BROKER_PID")
stop_hop() { for pid in "${hop_pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done; hop_pids=(); }
trap stop_hop EXIT INT TERM
settings=(-b "$ISLET_KAFKA_BOOTSTRAP" -t e2e-hop -p 0 -X enable.idempotence=true -X acks=all -X linger.ms=5)
# The topic exists (one partition) before the consumer starts at its end.
"$rdperf" -P "${settings[@]}" -c 1 -s 300 >"$hop_dir/create.log" 2>&1
"$rdperf" -C -l -A "$hop_dir/latency.txt" -b "$ISLET_KAFKA_BOOTSTRAP" -t e2e-hop -p 0 -o end -c "$hop_count" \
  -X fetch.wait.max.ms=10 >"$hop_dir/consumer.log" 2>&1 &
hop_pids+=("$!")
consumer=$!
sleep 2  # the consumer has fetched the partition's end
"$rdperf" -P -l "${settings[@]}" -r "$hop_rate" -c "$hop_count" -s 300 >"$hop_dir/producer.log" 2>&1
for _ in $(seq 1 100); do kill -0 "$consumer" 2>/dev/null || break; sleep 0.1; done  # at most 10 s more
stop_hop
trap - EXIT INT TERM
python3 - "$hop_dir/latency.txt" "$hop_count" <<'PY'
import sys
path, sent = sys.argv[1], int(sys.argv[2])
try:
    values = sorted(int(line) / 1000 for line in open(path) if line.strip().isdigit())
except FileNotFoundError:
    values = []
if not values:
    sys.exit("one Kafka hop: the consumer recorded nothing (see the logs next to latency.txt)")
p = lambda q: values[min(len(values) - 1, int(len(values) * q))]
print(f"one Kafka hop (rdkafka_performance), {len(values)} of {sent} messages: p50 {p(0.5):.1f} ms, p90 {p(0.9):.1f} ms, p99 {p(0.99):.1f} ms, max {values[-1]:.1f} ms")
print(f"latency\tkafka.hop\t{p(0.5):.2f}\t{p(0.9):.2f}\t{p(0.99):.2f}\t{values[-1]:.2f}\t{len(values)}\t{sent}")
PY

ISLET_BUILD_CONFIGURATION=release ISLET_LOG_LEVEL=${ISLET_LOG_LEVEL:-warning} exec scripts/demo.sh --latency "$@"
