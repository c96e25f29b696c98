#!/usr/bin/env bash
# content-service's figures: payload assembly per event in process (without and with an inline
# thumbnail, and the thumbnail itself), then events per second through one in-process instance
# against a fresh local broker (event read → push request acknowledged) next to a pass-through that
# reads the same events and writes them back with the same settings and the same in-order marking:
# content-service's own consumer and producer configuration (linger.ms=1, its send timeout), a
# producer of its own. The two run one after the other on the same broker, the pass-through first
# in odd rounds and second in even ones (the second meets a broker that holds more).
#
#   scripts/bench-content.sh             # 3 rounds of each, 20,000 events
#   ROUNDS=5 EVENTS=50000 scripts/bench-content.sh
#
# With --restore, instead: the activity memory rebuilt at start (islet-content-bench restore) over
# ACTIVITIES activities (default 100,000) with HISTORY requests and outcomes each (default 4), from
# the changelog and from the records, in alternating rounds on one fresh broker; its last line is
# `RESULT content-restore …`.
#
#   scripts/bench-content.sh --restore
#   ACTIVITIES=1000000 scripts/bench-content.sh --restore
#
# With --memory, instead: resident memory per live activity in process, without a broker
# (islet-content-bench memory): ACTIVITIES update tokens (default 1,000,000) applied to the token
# table as content-service keeps it, then an event each made into a push request, stored and
# answered; VmRSS before, with the tokens, with the memories, and after malloc's free pages are
# given back (as the service does every 30 s). Its last line is `RESULT content-memory …`
# (about 2.5 minutes at a million).
#
#   scripts/bench-content.sh --memory
set -euo pipefail

# shellcheck source=scripts/lib-bench.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-bench.sh"
rounds=${ROUNDS:-3}
events=${EVENTS:-20000}

build_benchmarks islet-content-bench
bench=$(benchmarks_bin)/islet-content-bench

if [ "${1:-}" = --memory ]; then
  echo "== memory per live activity (${ACTIVITIES:-1000000} activities, in process)"
  "$bench" memory --activities "${ACTIVITIES:-1000000}"
  exit 0
fi

if [ "${1:-}" = --restore ]; then
  eval "$(scripts/broker.sh)"
  trap 'stop_pids "$ISLET_BROKER_PID"' EXIT INT TERM
  echo "== restore (${ACTIVITIES:-100000} activities × ${HISTORY:-4} requests and outcomes; $rounds rounds of each way)"
  "$bench" restore --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --activities "${ACTIVITIES:-100000}" --history "${HISTORY:-4}" \
    --rounds "$rounds" --broker-pid "$ISLET_BROKER_PID"
  exit 0
fi

echo "== assembly (in process, median of 5 rounds of $events events)"
"$bench" assembly --events "$events" | tee "$ISLET_RUN_DIR/bench-content-assembly.txt"

broker_pid=""
stop_broker() { if [ -n "$broker_pid" ]; then stop_pids "$broker_pid"; fi; broker_pid=""; }
trap stop_broker EXIT INT TERM

echo "== pipeline ($events events over 1,000 activities, 4 partitions; a fresh broker per round)"
results="$ISLET_RUN_DIR/bench-content.tsv"
: > "$results"
for r in $(seq 1 "$rounds"); do
  stop_broker
  eval "$(scripts/broker.sh)"
  broker_pid=$ISLET_BROKER_PID
  order=(); [ $((r % 2)) -eq 0 ] && order=(--content-first)  # alternate: the second to run meets a fuller broker
  line=$("$bench" pipeline --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --events "$events" "${order[@]}" | tr '\n' ' ')
  echo "round $r: $line"
  printf '%s\t%s\n' "$r" "$line" >> "$results"
done
stop_broker

# Medians, and machine-readable lines for scripts/bench-report.sh: result, name, islet, reference,
# ratio (- when there is no reference), then details.
python3 scripts/bench_content.py "$ISLET_RUN_DIR/bench-content-assembly.txt" "$results"
