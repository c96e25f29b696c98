#!/usr/bin/env bash
# Produce and consume throughput of Islet's Kafka wrapper, side by side with librdkafka's own
# rdkafka_performance (built from the same librdkafka source) against the same local broker, in
# alternating rounds; prints the medians and the ratio wrapper / librdkafka.
#
#   scripts/bench-kafka.sh                 # 5 rounds, 300-byte and 2 KB messages
#   ROUNDS=3 scripts/bench-kafka.sh
#
# 'produce' hands records to librdkafka from one loop with a delivery callback each; 'send' (the
# awaited API, as token-registry and analytics-ingest call it from their requests) from 1,000 tasks
# and from 10,000 (at 300 B) is measured in the same rounds: 1,000 records in flight that each wait
# for their acknowledgement (about 5-8 ms with linger.ms=5) cannot go faster than about 150,000 a
# second, whatever the wrapper costs, so the 10,000 says what the path itself carries. Every
# figure comes with the CPU time per message of the process that sent or read it (user + system,
# librdkafka's threads included; the broker's not). Both sides use the same settings:
# idempotent, acks=all, linger.ms=5, murmur2 partitioner, keyless records over 4 partitions, each
# payload copied into librdkafka (rdkafka_performance -D: without it, it sends one static buffer
# without copying, which no real producer can do); consumers are fresh group members reading from the beginning
# with fetch.wait.max.ms=10, timed from the first message to the last. The wrapper's consumer
# marks every message processed; rdkafka_performance commits nothing.
set -euo pipefail

# shellcheck source=scripts/lib-bench.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-bench.sh"
rounds=${ROUNDS:-5}
tools=${ISLET_TOOLS:-$repo/.tools}

build_benchmarks islet-kafka-bench
bench=$(benchmarks_bin)/islet-kafka-bench
rdperf="$tools/bin/rdkafka_performance"
producer_props=(-X enable.idempotence=true -X acks=all -X linger.ms=5 -X partitioner=murmur2_random -X message.timeout.ms=30000)
results="$ISLET_RUN_DIR/bench-kafka.tsv"
: > "$results"

broker_pid=""
stop_broker() { if [ -n "$broker_pid" ]; then stop_pids "$broker_pid"; fi; broker_pid=""; }
trap stop_broker EXIT INT TERM

rate_rdkafka() {  # the msgs/s figure of rdkafka_performance's summary line
  grep -E "messages (produced|\(.*\) consumed)" | grep -oE "[0-9]+ msgs/s" | tail -1 | grep -oE "^[0-9]+"
}
# A new broker with the round's topics (tried three times: a broker that just started sometimes
# refuses the first admin request).
fresh_broker() {
  for _ in 1 2 3; do
    stop_broker
    eval "$(scripts/broker.sh)"
    broker_pid=$ISLET_BROKER_PID
    b=$ISLET_KAFKA_BOOTSTRAP
    if "$bench" create-topic --bootstrap "$b" --topic p-islet --partitions 4 >/dev/null &&
      "$bench" create-topic --bootstrap "$b" --topic p-rdk --partitions 4 >/dev/null &&
      "$bench" create-topic --bootstrap "$b" --topic c --partitions 4 >/dev/null; then
      return 0
    fi
    echo "(the new broker refused to create topics; starting another)" >&2
  done
  return 1
}
rate_islet() { python3 -c 'import json,sys; print(int(json.load(sys.stdin)["messagesPerSecond"]))'; }
# Each side's CPU seconds (scripts/lib.sh's cpu_of) in a file of its own: the runs are in subshells.
islet_cpu="$ISLET_RUN_DIR/bench-kafka.islet.cpu" rdk_cpu="$ISLET_RUN_DIR/bench-kafka.rdkafka.cpu"
cpu_us() {  # file messages: CPU microseconds per message
  python3 -c 'import sys; print(f"{float(open(sys.argv[1]).read()) * 1e6 / int(sys.argv[2]):.2f}")' "$1" "$2"
}

for size in 300 2048; do
  count=$([ "$size" -eq 300 ] && echo "${COUNT_SMALL:-300000}" || echo "${COUNT_LARGE:-100000}")
  echo "== ${size}-byte messages, $count per run, $rounds rounds"
  for r in $(seq 1 "$rounds"); do
    # A fresh broker per round: tansu keeps everything in memory, and a broker grown by earlier
    # rounds slows down unevenly.
    fresh_broker
    run_islet() { cpu_of "$islet_cpu" "$bench" produce --bootstrap "$b" --topic p-islet --count "$count" --size "$size" | rate_islet; }
    run_rdk() { cpu_of "$rdk_cpu" "$rdperf" -P -D -t p-rdk -b "$b" -s "$size" -c "$count" "${producer_props[@]}" 2>&1 | rate_rdkafka; }
    if [ $((r % 2)) -eq 1 ]; then i=$(run_islet); k=$(run_rdk); else k=$(run_rdk); i=$(run_islet); fi
    ic=$(cpu_us "$islet_cpu" "$count"); kc=$(cpu_us "$rdk_cpu" "$count")
    printf 'produce\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$r" "$i" "$k" "$ic" "$kc" | tee -a "$results"
    s=$(cpu_of "$islet_cpu" "$bench" send --bootstrap "$b" --topic p-islet --count "$((count / 2))" --size "$size" | rate_islet)
    printf 'send\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$r" "$s" "$k" "$(cpu_us "$islet_cpu" "$((count / 2))")" "$kc" | tee -a "$results"
    if [ "$size" -eq 300 ]; then
      s=$(cpu_of "$islet_cpu" "$bench" send --bootstrap "$b" --topic p-islet --count "$count" --size "$size" --concurrency 10000 | rate_islet)
      printf 'send10k\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$r" "$s" "$k" "$(cpu_us "$islet_cpu" "$count")" "$kc" | tee -a "$results"
    fi

    # One topic filled once; both consumers read all of it from the beginning.
    "$rdperf" -P -t c -b "$b" -s "$size" -c "$count" "${producer_props[@]}" >/dev/null 2>&1
    run_islet() { cpu_of "$islet_cpu" "$bench" consume --bootstrap "$b" --topic c --count "$count" | rate_islet; }
    run_rdk() {
      cpu_of "$rdk_cpu" "$rdperf" -C -G "rdk-$size-$r-$RANDOM" -t c -b "$b" -c "$count" -X auto.offset.reset=earliest -X fetch.wait.max.ms=10 2>&1 | rate_rdkafka
    }
    if [ $((r % 2)) -eq 1 ]; then i=$(run_islet); k=$(run_rdk); else k=$(run_rdk); i=$(run_islet); fi
    ic=$(cpu_us "$islet_cpu" "$count"); kc=$(cpu_us "$rdk_cpu" "$count")
    printf 'consume\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$r" "$i" "$k" "$ic" "$kc" | tee -a "$results"
  done
done
stop_broker

echo
python3 scripts/bench_kafka.py "$results"
