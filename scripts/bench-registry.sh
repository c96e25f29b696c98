#!/usr/bin/env bash
# token-registry throughput: registrations per second end to end (HTTP request → record
# acknowledged by Kafka → answer), side by side with the same server's cheapest authenticated
# route that writes nothing (GET an activity), in alternating rounds against the local broker.
# Load from wrk (Debian) on keep-alive connections; prints medians, the ratio, p99 latency and
# token-registry's CPU time per request on each route, and checks that every registration answered
# is a record on islet.tokens.v1.
# The registrations are spread over 4,096 users (the service takes one registration of a user at a
# time), with the per-user quota at its default.
#
#   scripts/bench-registry.sh            # 5 rounds of 15 s each, 2 wrk threads, 32 connections
#   ROUNDS=3 DURATION=10 CONNECTIONS=64 scripts/bench-registry.sh
set -euo pipefail

# shellcheck source=scripts/lib-bench.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-bench.sh"
rounds=${ROUNDS:-5}
duration=${DURATION:-15}
connections=${CONNECTIONS:-32}

need_wrk
build_release token-registry
build_benchmarks islet-kafka-bench
bin=$(swift build -c release --show-bin-path)
bench_bin=$(benchmarks_bin)

eval "$(scripts/broker.sh)"
pids+=("$ISLET_BROKER_PID")
for topic in islet.tokens.v1 islet.push-outcomes.v1 islet.dlq.v1; do
  "$bench_bin/islet-kafka-bench" create-topic --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --topic "$topic" --partitions 4 >/dev/null
done

secret=$(new_secret)
port=$(free_port)
ISLET_KAFKA_BOOTSTRAP=$ISLET_KAFKA_BOOTSTRAP ISLET_HTTP_HOST=127.0.0.1 ISLET_HTTP_PORT=$port ISLET_GRPC_PORT=0 ISLET_OPERATOR_PORT=0 \
  ISLET_AUTH_HS256_KEYS="bench=$secret" ISLET_LOG_LEVEL=warning \
  "$bin/token-registry" >"$ISLET_RUN_DIR/bench-registry.log" 2>&1 &
pids+=("$!")
url="http://127.0.0.1:$port"
wait_http "$url/health" 300 || { echo "token-registry did not become ready; its log:"; cat "$ISLET_RUN_DIR/bench-registry.log"; exit 1; }

# HS256 JWTs valid for an hour: one user's for the reads, 4,096 users' for the registrations (each
# wrk thread walks its own half; about 60 registrations a user over the run at 3,000/s, below the
# default quota of 1,000 live activities).
export BENCH_JWT=$(python3 scripts/bench_registry.py jwt "$secret")
export BENCH_JWTS="$ISLET_RUN_DIR/bench-registry-jwts.txt"
python3 scripts/bench_registry.py jwts "$secret" 4096 > "$BENCH_JWTS"
export BENCH_ACTIVITY=bench-read
curl -sf -X PUT "$url/v1/activities/$BENCH_ACTIVITY/token" -H "Authorization: Bearer $BENCH_JWT" -H "Content-Type: application/json" \
  -d "{\"token\":\"$(printf 'cd%.0s' $(seq 1 80))\",\"attributesType\":\"DeliveryAttributes\",\"app\":{\"bundleId\":\"com.example.food\",\"environment\":\"production\"},\"frequentUpdatesEnabled\":false,\"appVersion\":\"5.2.0\"}" >/dev/null

results="$ISLET_RUN_DIR/bench-registry.tsv"
: > "$results"
service_pid=${pids[-1]}
# One wrk run as a line of JSON, with the CPU seconds token-registry used during it ("cpu").
wrk_json() {  # script [seconds]
  local start line
  start=$(cpu_seconds "$service_pid")
  line=$(wrk -t2 -c"$connections" -d"${2:-$duration}s" --timeout 10s -s "$1" "$url" | grep '^{')
  echo "${line%\}},\"cpu\":$(cpu_since "$service_pid" "$start")}"
}
# A short warm-up of both routes (its registrations are counted in the check on the topic below).
warm=$(BENCH_RUN=warm wrk_json Benchmarks/TokenRegistry/register.lua 3)
wrk -t2 -c"$connections" -d3s -s Benchmarks/TokenRegistry/read.lua "$url" >/dev/null
for r in $(seq 1 "$rounds"); do
  export BENCH_RUN="r$r-$RANDOM"
  if [ $((r % 2)) -eq 1 ]; then
    w=$(wrk_json Benchmarks/TokenRegistry/register.lua); g=$(wrk_json Benchmarks/TokenRegistry/read.lua)
  else
    g=$(wrk_json Benchmarks/TokenRegistry/read.lua); w=$(wrk_json Benchmarks/TokenRegistry/register.lua)
  fi
  printf '%s\t%s\t%s\n' "$r" "$w" "$g" | tee -a "$results"
done

# Every registration answered was a Kafka write: the topic holds at least as many records as the
# registrations wrk counted (warm-up and the read route's one activity included; a request still in
# flight when wrk stopped may have been written unanswered). A registration answered without a
# write (a repeat, `unchanged`) would leave the topic short.
on_topic=$("$bench_bin/islet-kafka-bench" count-records --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --topic islet.tokens.v1)

python3 scripts/bench_registry.py summary "$results" "$warm" "$on_topic"
