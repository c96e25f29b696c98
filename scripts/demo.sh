#!/usr/bin/env bash
# The local demo: installs what is missing, builds, starts a broker, the services and the APNs
# simulator as local processes, and plays three scenarios through them the way an iOS app and a
# backend would (Tools/IsletDemo): a food order, a ride and a match by broadcast. What it prints after "↳" comes from
# the services: the pushes as the simulator received them, the registry's and ingest's answers,
# records read from the topics. Then it leaves everything running and prints the URLs.
#
#   scripts/demo.sh           # Ctrl-C stops everything
#   scripts/demo.sh --exit    # stop after the scenarios
#   scripts/demo.sh --latency [islet-stack-bench latency options]   # instead of the scenarios: the
#                             # end-to-end latency benchmark (scripts/bench-e2e.sh: release build)
#   scripts/demo.sh --memory [islet-stack-bench memory options]     # instead of the scenarios: memory
#   scripts/demo.sh --scale [islet-stack-bench scale options]       # a second content-service and apns-dispatcher, then scale
#                             # per live activity (scripts/bench-memory.sh: release build)
#   ISLET_BROKER=mock scripts/demo.sh --latency ...   # on librdkafka's mock cluster instead of
#                             # tansu (scripts/broker.sh)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$repo/scripts/lib.sh"
cd "$repo"
export ISLET_RUN_DIR=${ISLET_RUN_DIR:-$repo/.islet-run}
run=$ISLET_RUN_DIR/demo
rm -rf "$run" && mkdir -p "$run"
exit_after=no
bench=no
[ "${1:-}" = "--exit" ] && exit_after=yes
case "${1:-}" in --latency | --memory | --scale) bench=${1#--}; exit_after=yes; shift ;; esac
configuration=${ISLET_BUILD_CONFIGURATION:-debug}

scripts/bootstrap.sh
echo "== build (several minutes the first time)"
swift build -c "$configuration" 2>&1 | grep -E "error|warning: unre|Compiling|Build complete" | grep -v "^\[" | tail -3
bin=$(swift build -c "$configuration" --show-bin-path)
if [ "$bench" != no ]; then  # islet-stack-bench: the benchmarks' package (Benchmarks/Package.swift)
  swift build -c "$configuration" --package-path Benchmarks --product islet-stack-bench 2>&1 | grep -E "error|complete" | tail -3
  stack_bench=$(swift build -c "$configuration" --package-path Benchmarks --show-bin-path)/islet-stack-bench
fi

# Every fixed port the demo's processes listen on (the broker takes a free one), with the operator
# listeners (HTTP port + 100).
ports=(8099 8090 2197 8081 8181 9081 8083 8183 9083 8082 8084 8184)
[ "$bench" = scale ] && ports+=(8093 8193 9093 8092)
require_free_ports "${ports[@]}" || exit 2

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done; pids=(); }
trap cleanup EXIT INT TERM
wait_ready() {  # name, URL: until /health answers 200 (ready), at most 90 s
  wait_http "$2/health" 900 && return 0
  echo "$1 did not become ready; the end of its log ($run/$1.log):" >&2; tail -20 "$run/$1.log" >&2; return 1
}

echo "== broker"
eval "$(scripts/broker.sh)"
pids+=("$ISLET_BROKER_PID")
bootstrap=$ISLET_KAFKA_BOOTSTRAP
# The mock broker (ISLET_BROKER=mock, benchmarks only) starts with the topics; tansu creates them.
[ "${ISLET_BROKER:-tansu}" = mock ] || "$bin/islet-demo" setup --bootstrap "$bootstrap"

echo "== services (logs in $run)"
key_id=DEMOKEY001; team=DEMOTEAM01
# The simulator's and the dispatcher's signing key: P-256 in PKCS#8 PEM, what an AuthKey .p8 is.
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$run/AuthKey.p8" 2>/dev/null
link_secret=$(new_secret); jwt_secret=$(new_secret); backend_key=$(new_secret); ticket_secret=$(new_secret)
# The backends' gRPC APIs (loopback only) take calls from this key: `islet activity`, `islet stale`.
grpc_keys="demo-backend=$backend_key:read+write"
common=(ISLET_KAFKA_BOOTSTRAP="$bootstrap" ISLET_HTTP_HOST=127.0.0.1 ISLET_LOG_LEVEL="${ISLET_LOG_LEVEL:-notice}")

"$bin/islet-demo" serve-images --port 8099 >"$run/images.log" 2>&1 &
pids+=("$!")
env "${common[@]}" ISLET_SIMULATOR_KEYS="$key_id=$team:$run/AuthKey.p8" ISLET_HTTP_PORT=8090 ISLET_SIMULATOR_PORT=2197 \
  ISLET_SIMULATOR_TLS_CERTIFICATE_OUT="$run/simulator.pem" "$bin/apns-simulator" >"$run/apns-simulator.log" 2>&1 &
pids+=("$!"); simulator_pid=$!
wait_ready apns-simulator http://127.0.0.1:8090
# The latency and memory runs register thousands of activities for one user: no quota for them.
quota=(); [ "$bench" = no ] || quota=(ISLET_QUOTA_LIVE_ACTIVITIES=0)
# As docker-compose.yml ships it, the scenarios' registrations need their activity's ticket (the
# apps' backends sign them: `play --ticket-key`); the benchmarks' loads carry none.
tickets=(); [ "$bench" = no ] && tickets=(ISLET_TICKETS_REQUIRED=true)
env "${common[@]}" ${quota[@]+"${quota[@]}"} ${tickets[@]+"${tickets[@]}"} ISLET_HTTP_PORT=8081 ISLET_GRPC_PORT=9081 ISLET_GRPC_KEYS="$grpc_keys" ISLET_AUTH_HS256_KEYS="demo=$jwt_secret" ISLET_TICKET_HS256_KEYS="orders=$ticket_secret" \
  ISLET_CONTENT_HTTP=127.0.0.1:8083 ISLET_CONTENT_HTTP_KEY="$backend_key" \
  ISLET_APPS=com.example.food,com.example.ride,com.example.scores "$bin/token-registry" >"$run/token-registry.log" 2>&1 &
pids+=("$!")
env "${common[@]}" ISLET_HTTP_PORT=8083 ISLET_GRPC_PORT=9083 ISLET_GRPC_KEYS="$grpc_keys" ISLET_LINK_KEYS="demo=$link_secret" \
  ISLET_REGISTRY_GRPC=127.0.0.1:9081 ISLET_REGISTRY_GRPC_KEY="$backend_key" \
  ISLET_THUMBNAIL_HOSTS=127.0.0.1:8099 \
  "$bin/content-service" >"$run/content-service.log" 2>&1 &
pids+=("$!"); content_pid=$!
# The ride app gets a small priority-10 budget (3 an hour) so the demo shows updates falling to 5.
env "${common[@]}" ISLET_HTTP_PORT=8082 ISLET_APNS_KEYS="$team=$key_id:$run/AuthKey.p8" \
  ISLET_APNS_APPS="com.example.food=$team,com.example.ride=$team,com.example.scores=$team" ISLET_APNS_URL=https://127.0.0.1:2197 \
  ISLET_APNS_CA_FILE="$run/simulator.pem" ISLET_BUDGET_APPS="com.example.ride=3/6" \
  "$bin/apns-dispatcher" >"$run/apns-dispatcher.log" 2>&1 &
pids+=("$!"); dispatcher_pid=$!
env "${common[@]}" ISLET_HTTP_PORT=8084 ISLET_LINK_KEYS="demo=$link_secret" \
  "$bin/analytics-ingest" >"$run/analytics-ingest.log" 2>&1 &
pids+=("$!")
for service in token-registry:8081 content-service:8083 apns-dispatcher:8082 analytics-ingest:8084; do
  wait_ready "${service%%:*}" "http://127.0.0.1:${service##*:}"
done
# Ready answers from our processes, not from something that took a port meanwhile.
for pid in "${pids[@]}"; do
  kill -0 "$pid" 2>/dev/null || { echo "a process of the demo exited (pid $pid): see the logs in $run" >&2; exit 1; }
done

if [ "$bench" = latency ]; then
  echo "== end-to-end latency ($configuration build)"
  "$stack_bench" latency --bootstrap "$bootstrap" --jwt-key "demo=$jwt_secret" --process "broker=$ISLET_BROKER_PID" \
    --process "apns-simulator=$simulator_pid" --process "content-service=$content_pid" --process "apns-dispatcher=$dispatcher_pid" "$@"
  exit 0
fi
if [ "$bench" = scale ]; then
  # The second instances, in the same consumer groups: each service's partitions are shared.
  env "${common[@]}" ISLET_HTTP_PORT=8093 ISLET_GRPC_PORT=9093 ISLET_GRPC_KEYS="$grpc_keys" ISLET_LINK_KEYS="demo=$link_secret" \
    ISLET_REGISTRY_GRPC=127.0.0.1:9081 ISLET_REGISTRY_GRPC_KEY="$backend_key" \
    "$bin/content-service" >"$run/content-service-2.log" 2>&1 &
  pids+=("$!"); content2_pid=$!
  env "${common[@]}" ISLET_HTTP_PORT=8092 ISLET_APNS_KEYS="$team=$key_id:$run/AuthKey.p8" \
    ISLET_APNS_APPS="com.example.food=$team,com.example.ride=$team,com.example.scores=$team" ISLET_APNS_URL=https://127.0.0.1:2197 \
    ISLET_APNS_CA_FILE="$run/simulator.pem" ISLET_BUDGET_APPS="com.example.ride=3/6" \
    "$bin/apns-dispatcher" >"$run/apns-dispatcher-2.log" 2>&1 &
  pids+=("$!"); dispatcher2_pid=$!
  wait_ready content-service-2 http://127.0.0.1:8093
  wait_ready apns-dispatcher-2 http://127.0.0.1:8092
  echo "== two instances of content-service and apns-dispatcher at scale ($configuration build)"
  "$stack_bench" scale --bootstrap "$bootstrap" --jwt-key "demo=$jwt_secret" \
    --instance "content:content-1=$content_pid@http://127.0.0.1:8083/metrics" --instance "content:content-2=$content2_pid@http://127.0.0.1:8093/metrics" \
    --instance "dispatcher:dispatcher-1=$dispatcher_pid@http://127.0.0.1:8082/metrics" \
    --instance "dispatcher:dispatcher-2=$dispatcher2_pid@http://127.0.0.1:8092/metrics" \
    --kill content-1 --kill dispatcher-1 "$@"
  exit 0
fi
if [ "$bench" = memory ]; then
  echo "== memory per live activity ($configuration build)"
  "$stack_bench" memory --bootstrap "$bootstrap" --jwt-key "demo=$jwt_secret" \
    --process "apns-dispatcher=$dispatcher_pid" --process "content-service=$content_pid" "$@"
  exit 0
fi

echo "== scenarios"
"$bin/islet-demo" play --bootstrap "$bootstrap" --jwt-key "demo=$jwt_secret" --backend-key "$backend_key" --ticket-key "orders=$ticket_secret"

cat <<TEXT

== running
  Kafka (${ISLET_BROKER:-tansu})       $bootstrap
  token-registry      http://127.0.0.1:8081 (gRPC 9081, metrics http://127.0.0.1:8181/metrics)   JWT key: demo=$jwt_secret
  content-service     http://127.0.0.1:8083 (gRPC 9083)   stale activities: http://127.0.0.1:8183/v1/activities/stale
  backend key         ISLET_CLI_GRPC_KEY=$backend_key  (content-service's HTTP API, islet publish-event --url, islet activity <id>, islet stale)
  activity tickets    ISLET_CLI_TICKET_KEY=orders=$ticket_secret  (islet register-token signs the owner's ticket; docs/token-registry.md)
  apns-dispatcher     http://127.0.0.1:8082/metrics
  analytics-ingest    http://127.0.0.1:8084 (metrics http://127.0.0.1:8184/metrics)
  APNs simulator      https://127.0.0.1:2197, admin http://127.0.0.1:8090/admin/notifications
  logs                $run
TEXT
if [ "$exit_after" = yes ]; then exit 0; fi
echo "Ctrl-C stops everything."
wait
