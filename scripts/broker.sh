#!/usr/bin/env bash
# Starts the tansu broker (Kafka-compatible, in memory) on a free loopback port and prints
#   ISLET_KAFKA_BOOTSTRAP=127.0.0.1:<port>
#   ISLET_BROKER_PID=<pid>
# on stdout, ready to `eval`. The broker's log goes to $ISLET_RUN_DIR/broker.log.
#
#   eval "$(scripts/broker.sh)"; ...; kill "$ISLET_BROKER_PID"
#
# ISLET_BROKER=mock starts librdkafka's mock cluster instead (`islet-demo mock-broker`, from the
# build of ISLET_BUILD_CONFIGURATION, which must exist): a broker for benchmarks whose reads do not
# get slower as it fills. It already has every Islet topic (4 partitions) and those named in
# ISLET_BROKER_TOPICS ("name:partitions ..."); it cannot create topics on request.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$repo/scripts/lib.sh"
tools=${ISLET_TOOLS:-$repo/.tools}
run_dir=${ISLET_RUN_DIR:-$repo/.islet-run}
mkdir -p "$run_dir"
if [ "${ISLET_BROKER:-tansu}" = mock ]; then
  demo=$(cd "$repo" && swift build -c "${ISLET_BUILD_CONFIGURATION:-debug}" --show-bin-path)/islet-demo
  [ -x "$demo" ] || { echo "$demo not found: build first" >&2; exit 1; }
  topics=()
  for topic in ${ISLET_BROKER_TOPICS:-}; do topics+=(--topic "$topic"); done
  rm -f "$run_dir/broker.address"  # never read the address of an earlier run's broker
  "$demo" mock-broker ${topics[@]+"${topics[@]}"} >"$run_dir/broker.address" 2>"$run_dir/broker.log" </dev/null &
  pid=$!
  for _ in $(seq 1 100); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "the mock broker exited during start-up; its log:" >&2; cat "$run_dir/broker.log" >&2; exit 1
    fi
    if grep -q '^ISLET_KAFKA_BOOTSTRAP=' "$run_dir/broker.address"; then
      grep '^ISLET_KAFKA_BOOTSTRAP=' "$run_dir/broker.address"
      echo "ISLET_BROKER_PID=$pid"
      exit 0
    fi
    sleep 0.1
  done
  echo "the mock broker did not start within 10 s" >&2
  kill "$pid" 2>/dev/null || true
  exit 1
elif [ "${ISLET_BROKER:-tansu}" != tansu ]; then
  echo "ISLET_BROKER must be tansu or mock, got $ISLET_BROKER" >&2; exit 1
fi

tansu="$tools/bin/tansu"
[ -x "$tansu" ] || { echo "tansu not found at $tansu: run scripts/bootstrap.sh" >&2; exit 1; }

port=${ISLET_BROKER_PORT:-$(free_port)}
# ISLET_BROKER_AUTHENTICATION=1: clients must log in (SASL). tansu 0.6 keeps no SCRAM user in
# memory, so it refuses every login (docs/operations.md): for tests of a refused login only.
authentication=()
[ "${ISLET_BROKER_AUTHENTICATION:-0}" = 1 ] && authentication=(--authentication)
"$tansu" broker \
  --listener-url "tcp://127.0.0.1:$port" \
  --advertised-listener-url "tcp://127.0.0.1:$port" \
  --storage-engine memory://tansu/ ${authentication[@]+"${authentication[@]}"} \
  >"$run_dir/broker.log" 2>&1 </dev/null &
pid=$!

for _ in $(seq 1 100); do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "tansu exited during start-up; its log:" >&2; cat "$run_dir/broker.log" >&2; exit 1
  fi
  if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$port),0.2).close()" 2>/dev/null; then
    echo "ISLET_KAFKA_BOOTSTRAP=127.0.0.1:$port"
    echo "ISLET_BROKER_PID=$pid"
    exit 0
  fi
  sleep 0.1
done
echo "tansu did not accept connections on 127.0.0.1:$port within 10 s" >&2
kill "$pid" 2>/dev/null || true
exit 1
