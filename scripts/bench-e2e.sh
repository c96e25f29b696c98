#!/usr/bin/env bash
# End-to-end latency: every service (release build) and the APNs simulator as processes on a fresh
# broker, domain events produced at a steady rate to many activities, and the time from producing
# each event to the simulator receiving its push: p50/p90/p99 (Tools/IsletDemo, `latency`).
#
# Its reference, measured first in the same run: the product's two Kafka hops, each on a fresh broker
# of the same kind, by librdkafka's own rdkafka_performance in latency mode (a producer stamping each
# message, a consumer reading the stamp) at the same rate, idempotent, acks=all, with the consumers'
# fetch.wait.max.ms=10 and each hop's own linger: 5 ms for the event (the backend's producer, the
# load generator's default), 1 ms for the push request (content-service's producer). The reference
# is the two hops' sum (at p99 an upper bound: two hops rarely both meet their worst); the product
# adds the services' work and the HTTP/2 send.
#
# It runs on two brokers, each with its own reference (E2E_BROKERS, default "tansu mock"):
# - tansu, the broker of the tests and the demo (in memory): its reads get slower as its topics
#   fill (docs/operations.md), so its figure grows with the length of the run;
# - librdkafka's mock cluster (`islet-demo mock-broker`, ISLET_BROKER=mock in scripts/broker.sh): a
#   broker in one thread of its own process whose reads do not slow down as it fills. Like tansu,
#   it holds a fetch for fetch.wait.max.ms when a partition has nothing new and does not answer
#   early when a record arrives (Apache Kafka does), which is what the 10 ms wait costs each hop.
#
#   scripts/bench-e2e.sh                         # 1,000 events/s for 30 s over 2,000 activities
#   scripts/bench-e2e.sh --rate 500 --seconds 60
#   E2E_BROKERS=mock scripts/bench-e2e.sh        # one broker only
#   HOP_RATE=1000 HOP_SECONDS=20 scripts/bench-e2e.sh   # the reference's rate (default: the product's) and length
#
# Besides what people read, it prints for each broker b: latency<TAB>kafka.hop.b<TAB>p50… (the event's
# hop, linger 5 ms), latency<TAB>kafka.hop.b.linger1<TAB>p50… (the push request's, linger 1 ms),
# latency<TAB>e2e.b<TAB>p50<TAB>p90<TAB>p99<TAB>max<TAB>received<TAB>sent, and detail<TAB>b<TAB>text
# (scripts/bench-report.sh reads them); last, one line RESULT e2e with every broker's figures.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$repo/scripts/lib.sh"
cd "$repo"
export ISLET_RUN_DIR=${ISLET_RUN_DIR:-$repo/.islet-run}
# The reference runs at the product's rate (--rate, 1,000 events/s by default) unless HOP_RATE says otherwise.
product_rate=1000
previous=
for arg in "$@"; do
  case $arg in --rate=*) product_rate=${arg#--rate=} ;; esac
  [ "$previous" = --rate ] && product_rate=$arg
  previous=$arg
done
hop_rate=${HOP_RATE:-$product_rate}
hop_count=$((hop_rate * ${HOP_SECONDS:-20}))
rdperf=${ISLET_TOOLS:-$repo/.tools}/bin/rdkafka_performance

scripts/bootstrap.sh
echo "== build (release)"
swift build -c release 2>&1 | grep -E "error|Build complete" | tail -3
swift build -c release --package-path Benchmarks --product islet-stack-bench 2>&1 | grep -E "error|complete" | tail -3
export ISLET_BUILD_CONFIGURATION=release
brokers=${E2E_BROKERS:-tansu mock}
hop_pids=()
lines=$ISLET_RUN_DIR/bench-e2e-lines.tsv  # the machine lines, for the RESULT line at the end
mkdir -p "$ISLET_RUN_DIR" && : >"$lines"

hop() {  # BROKER LINGER-MS: one Kafka hop on a fresh broker of that kind
  local broker=$1 linger=$2
  echo "== reference on $broker: one Kafka hop, linger $linger ms (rdkafka_performance -l, $hop_count messages of 300 bytes at $hop_rate/s, a fresh broker)"
  local hop_dir=$ISLET_RUN_DIR/bench-e2e-hop-$broker-linger$linger
  rm -rf "$hop_dir" && mkdir -p "$hop_dir"
  local started
  started=$(ISLET_BROKER=$broker ISLET_BROKER_TOPICS=e2e-hop:1 ISLET_RUN_DIR="$hop_dir" scripts/broker.sh) || return 1
  eval "$started"
  hop_pids=("$ISLET_BROKER_PID")
  trap stop_hop EXIT INT TERM
  local settings=(-b "$ISLET_KAFKA_BOOTSTRAP" -t e2e-hop -p 0 -X enable.idempotence=true -X acks=all -X "linger.ms=$linger")
  # The topic exists (one partition) before the consumer starts at its end.
  "$rdperf" -P "${settings[@]}" -c 1 -s 300 >"$hop_dir/create.log" 2>&1
  "$rdperf" -C -l -A "$hop_dir/latency.txt" -b "$ISLET_KAFKA_BOOTSTRAP" -t e2e-hop -p 0 -o end -c "$hop_count" \
    -X fetch.wait.max.ms=10 >"$hop_dir/consumer.log" 2>&1 &
  hop_pids+=("$!")
  local consumer=$!
  sleep 2  # the consumer has fetched the partition's end
  "$rdperf" -P -l "${settings[@]}" -r "$hop_rate" -c "$hop_count" -s 300 >"$hop_dir/producer.log" 2>&1
  for _ in $(seq 1 100); do kill -0 "$consumer" 2>/dev/null || break; sleep 0.1; done  # at most 10 s more
  stop_hop
  trap - EXIT INT TERM
  python3 scripts/bench_e2e.py hop "$hop_dir/latency.txt" "$hop_count" "$broker" "$linger" | tee -a "$lines"
}
stop_hop() { stop_pids "${hop_pids[@]}"; hop_pids=(); }

# One broker failing does not stop the other's measurement; the script fails at the end.
failed=()
for broker in $brokers; do
  case $broker in tansu | mock) ;; *) echo "E2E_BROKERS: tansu and/or mock, got $broker" >&2; exit 2 ;; esac
  if ! { hop "$broker" 5 && hop "$broker" 1; }; then
    stop_hop
    failed+=("$broker (reference)")
    continue
  fi
  echo "== end to end on $broker"
  out=$ISLET_RUN_DIR/bench-e2e-$broker.txt
  if ! ISLET_BROKER=$broker ISLET_LOG_LEVEL=${ISLET_LOG_LEVEL:-warning} scripts/demo.sh --latency "$@" | tee "$out"; then
    failed+=("$broker")
    continue
  fi
  python3 scripts/bench_e2e.py result "$out" "$broker" | tee -a "$lines"
done
python3 scripts/bench_e2e.py summary "$lines"
if [ ${#failed[@]} -gt 0 ]; then
  echo "end to end failed on: ${failed[*]}" >&2
  exit 1
fi
