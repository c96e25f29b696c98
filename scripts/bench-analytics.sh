#!/usr/bin/env bash
# analytics-ingest throughput: accepted taps per second end to end (HTTP request → signature
# verified → ClickEvent acknowledged by Kafka → answer), side by side with the same server's no-op
# route (POST /bench/noop: reads the same body, answers 204), in alternating rounds against the
# local broker. Load from wrk (Debian) on keep-alive connections; every request is a new tap (a
# new tap time, and a link not tapped in the last second).
# Then in open loop (Benchmarks/HTTPLoad, wrk2-style: requests sent at a constant rate whatever the
# answers, latency from each request's intended time): the highest rate each route sustains with
# p99 ≤ 50 ms, found by rising rates, in alternating rounds, with the service's CPU per request.
# Prints medians, the ratios, p99 latency, and checks that the records on islet.clicks.v1 equal
# the taps the service accepted.
#
#   scripts/bench-analytics.sh            # 5 rounds of 15 s each, 2 wrk threads, 32 connections
#   ROUNDS=3 DURATION=10 CONNECTIONS=64 OPEN_ROUNDS=1 scripts/bench-analytics.sh
set -euo pipefail

# shellcheck source=scripts/lib-bench.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-bench.sh"
rounds=${ROUNDS:-5}
duration=${DURATION:-15}
connections=${CONNECTIONS:-32}
open_rounds=${OPEN_ROUNDS:-3}

need_wrk
build_release analytics-ingest
build_benchmarks islet-kafka-bench islet-http-load
bin=$(swift build -c release --show-bin-path)
bench_bin=$(benchmarks_bin)

eval "$(scripts/broker.sh)"
pids+=("$ISLET_BROKER_PID")
for topic in islet.clicks.v1 islet.clicks-rejected.v1; do
  "$bench_bin/islet-kafka-bench" create-topic --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --topic "$topic" --partitions 4 >/dev/null
done

secret=$(new_secret)
port=$(free_port)
operator_port=$(free_port)
# Every request comes from 127.0.0.1: the rate limiter runs but is set far above the load.
ISLET_KAFKA_BOOTSTRAP=$ISLET_KAFKA_BOOTSTRAP ISLET_HTTP_HOST=127.0.0.1 ISLET_HTTP_PORT=$port ISLET_OPERATOR_PORT=$operator_port \
  ISLET_LINK_KEYS="bench=$secret" ISLET_ANALYTICS_BENCH_ROUTE=true ISLET_LOG_LEVEL=warning \
  ISLET_ANALYTICS_RATE_PER_SECOND=1000000 ISLET_ANALYTICS_RATE_BURST=1000000 \
  "$bin/analytics-ingest" >"$ISLET_RUN_DIR/bench-analytics.log" 2>&1 &
service_pid=$!
pids+=("$service_pid")
url="http://127.0.0.1:$port"
wait_http "$url/health" 300 || { echo "analytics-ingest did not become ready; its log:"; cat "$ISLET_RUN_DIR/bench-analytics.log"; exit 1; }

# Signed links, issued 11 hours ago (tap times then stay within the 12 h validity and before now).
# The signature is the codec's (docs/links.md), made in scripts/bench_analytics.py. The service
# counts a link at most once a second of its clock (a later tap of it is answered as a repeat and
# not written), so a run needs more links than it sends taps in a second: 100,000, each wrk thread
# walking its own half, is each link again after several seconds at the rates this machine reaches.
export BENCH_ISSUED=$(( $(date +%s) - 11 * 3600 ))
sign_links() {  # run id, count: a file of that many links
  local file="$ISLET_RUN_DIR/bench-analytics-links-$1.txt"
  python3 scripts/bench_analytics.py links "$secret" "$BENCH_ISSUED" "$1" "$2" > "$file"
  echo "$file"
}
export BENCH_OFFSET_MS=1000
run_wrk() {  # path, run id, seconds
  BENCH_PATH=$1 BENCH_LINKS=$(sign_links "$2" 100000) wrk -t2 -c"$connections" -d"$3s" --timeout 10s -s Benchmarks/AnalyticsIngest/tap.lua "$url" | grep '^{'
}

# One tap by hand: it must be accepted (checks the signing above against the service).
first=$(head -1 "$(sign_links check 1)")
tapped=$(date -u -d "@$((BENCH_ISSUED + 5))" +%Y-%m-%dT%H:%M:%S.000Z)
answer=$(curl -s -X POST "$url/v1/taps" -H 'Content-Type: application/json' \
  -d "{\"url\":\"$first\",\"tappedAt\":\"$tapped\",\"appVersion\":\"5.2.0\",\"osVersion\":\"18.1\"}")
case "$answer" in *'"accepted"'*) ;; *) echo "the check tap was not accepted: $answer"; exit 1 ;; esac

results="$ISLET_RUN_DIR/bench-analytics.tsv"
: > "$results"
# A short warm-up of both routes.
run_wrk /v1/taps warm 3 >/dev/null
run_wrk /bench/noop warm 3 >/dev/null
for r in $(seq 1 "$rounds"); do
  run="r$r-$RANDOM"
  if [ $((r % 2)) -eq 1 ]; then
    t=$(run_wrk /v1/taps "$run" "$duration"); n=$(run_wrk /bench/noop "$run" "$duration")
  else
    n=$(run_wrk /bench/noop "$run" "$duration"); t=$(run_wrk /v1/taps "$run" "$duration")
  fi
  printf '%s\t%s\t%s\n' "$r" "$t" "$n" | tee -a "$results"
done

# Open loop: the highest rate each route sustains with p99 ≤ 50 ms, requests sent at their times
# whether earlier answers came or not (Benchmarks/HTTPLoad), in alternating rounds.
open_results="$ISLET_RUN_DIR/bench-analytics-open.tsv"
: > "$open_results"
sweep() {  # path: one line of JSON
  python3 scripts/bench_analytics.py sweep "$bench_bin/islet-http-load" "$url" "$1" "$(sign_links "open-$RANDOM" 100000)" "$service_pid"
}
for r in $(seq 1 "$open_rounds"); do
  echo "open loop, round $r:" >&2
  if [ $((r % 2)) -eq 1 ]; then t=$(sweep /v1/taps); n=$(sweep /bench/noop); else n=$(sweep /bench/noop); t=$(sweep /v1/taps); fi
  printf '%s\t%s\t%s\n' "$r" "$t" "$n" | tee -a "$open_results"
done

# Every accepted tap is on the topic, once: the service's count against the topic's.
accepted=$(curl -s "http://127.0.0.1:$operator_port/metrics" | awk -F' ' '/^islet_analytics_taps_total\{verdict="accepted"\}/ {print $2}')
other=$(curl -s "http://127.0.0.1:$operator_port/metrics" | awk -F' ' '/^islet_analytics_taps_total\{verdict="(duplicate|rejected|unavailable)"\}/ {s += $2} END {print s + 0}')
on_topic=$("$bench_bin/islet-kafka-bench" count-records --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --topic islet.clicks.v1)

python3 scripts/bench_analytics.py summary "$results" "$accepted" "$on_topic" "$other" "$open_results"
