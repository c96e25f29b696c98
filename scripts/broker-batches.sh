#!/usr/bin/env bash
# The local broker (tansu, in memory) and small batches: the same number of 300-byte records written
# one per batch (linger.ms=0, 2,000 a second: token-registry writes a registration this way when
# registrations come one at a time) and in big batches (linger.ms=5, as fast as possible), then
# each topic read from the beginning by a new consumer group member, at 20,000 and at 40,000 records.
# Prints the time of each read and the broker's CPU time during it. Takes 2 to 10 minutes, most
# of it the second read of the one-record batches.
#
#   scripts/broker-batches.sh
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$repo/scripts/lib.sh"
cd "$repo"
export ISLET_RUN_DIR=${ISLET_RUN_DIR:-$repo/.islet-run}/broker-batches
scripts/bootstrap.sh
build_benchmarks islet-kafka-bench
bench=$(benchmarks_bin)/islet-kafka-bench
perf=${ISLET_TOOLS:-$repo/.tools}/bin/rdkafka_performance
eval "$(scripts/broker.sh)"
trap 'kill "$ISLET_BROKER_PID" 2>/dev/null || true' EXIT INT TERM
b=$ISLET_KAFKA_BOOTSTRAP
cpu() { awk '{print $14 + $15}' "/proc/$ISLET_BROKER_PID/stat"; }  # clock ticks (1/100 s)
producer=(-X enable.idempotence=true -X acks=all -b "$b" -q)
for t in small big; do "$bench" create-topic --bootstrap "$b" --topic "$t" --partitions 3 >/dev/null; done
read_all() {  # topic, records
  local before start end
  before=$(cpu); start=$(date +%s.%N)
  "$perf" -C -G "read-$1-$2" -t "$1" -c "$2" -X fetch.wait.max.ms=10 -X auto.offset.reset=earliest -b "$b" -q -i 1000000 >/dev/null 2>&1
  end=$(date +%s.%N)
  python3 -c "print(f'  $1: read $2 records from the beginning in {$end - $start:.1f} s; broker CPU {($(cpu) - $before) / 100:.2f} s')"
}
total=0
for _ in 1 2; do
  "$perf" -P -t small -s 300 -c 20000 -r 2000 -X linger.ms=0 "${producer[@]}" >/dev/null 2>&1
  "$perf" -P -t big -s 300 -c 20000 -X linger.ms=5 "${producer[@]}" >/dev/null 2>&1
  total=$((total + 20000))
  echo "$total records in each topic (small: one record per batch; big: batches of many)"
  read_all small "$total"
  read_all big "$total"
done
