#!/usr/bin/env bash
# apns-dispatcher throughput: pushes per second of one dispatcher instance, from push-requests on
# the broker to the simulator's 200, with 1 KB payloads over many activities — side by side, in
# alternating rounds, with (a) h2load posting the same requests straight to the same simulator over
# one TLS connection (the HTTP/2 ceiling of this machine for that server) and (b) the Python APNs
# client aioapns pushing the same notifications to it. Then latency (request produced → simulator
# receipt) at a fixed 1,000 requests/s.
#
#   scripts/bench-dispatcher.sh                  # 3 rounds of 50,000 pushes
#   ROUNDS=5 COUNT=100000 scripts/bench-dispatcher.sh
#   ROUNDS=0 LATENCY_SECONDS=60 scripts/bench-dispatcher.sh   # the latency run only, 60 s instead of 20
#   DISPATCHER_BIN=/path/to/apns-dispatcher scripts/bench-dispatcher.sh   # another build of the dispatcher (A/B)
#
# Beside each dispatcher rate: its CPU time per push — user + system time (from /proc) of the
# dispatcher process of the round, over its whole life (start-up, joining the group, reading the
# backlog), divided by the pushes.
set -euo pipefail
shopt -s inherit_errexit  # a failure inside `d=$(run_dispatcher)` fails the script, not just prints 0

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$repo/scripts/lib.sh"
cd "$repo"
export ISLET_RUN_DIR=${ISLET_RUN_DIR:-$repo/.islet-run}
run=$ISLET_RUN_DIR/bench-dispatcher
mkdir -p "$run"
rounds=${ROUNDS:-3}  # 0: only the latency run
count=${COUNT:-50000}
aio_count=${AIO_COUNT:-5000}
activities=${ACTIVITIES:-2000}
latency_seconds=${LATENCY_SECONDS:-20}  # the latency run at 1,000 requests/s

scripts/bootstrap.sh
if ! command -v h2load >/dev/null || ! command -v curl >/dev/null; then
  as_root apt-get install -y -q nghttp2-client curl >/dev/null
fi
python3 -c 'import aioapns' 2>/dev/null || python3 -m pip install -q 'aioapns==4.0'
build_release apns-simulator apns-dispatcher islet-dispatch-bench islet-kafka-bench
bin=$(swift build -c release --show-bin-path)

pids=()
cleanup() { stop_pids "${pids[@]}"; pids=(); }
trap cleanup EXIT INT TERM

key_id=BENCHKEY01; team=BENCHTEAM1; bundle=com.example.bench
"$bin/islet-dispatch-bench" key --out "$run/AuthKey.p8"
sim_port=$(free_port); admin_port=$(free_port)
ISLET_SIMULATOR_KEYS="$key_id=$team:$run/AuthKey.p8" ISLET_SIMULATOR_PORT=$sim_port ISLET_HTTP_PORT=$admin_port \
  ISLET_SIMULATOR_TLS_CERTIFICATE_OUT="$run/simulator.pem" ISLET_SIMULATOR_RECORD_CAPACITY=$((count + 50000)) ISLET_LOG_LEVEL=warning \
  "$bin/apns-simulator" >"$run/simulator.log" 2>&1 &
pids+=("$!")
admin="http://127.0.0.1:$admin_port"
wait_http "$admin/health"
stats() { curl -sf "$admin/admin/stats"; }
reset_simulator() { curl -sf -X DELETE "$admin/admin/notifications" >/dev/null; }

# The same request for h2load: one activity's token, a 1 KB update.
jwt=$("$bin/islet-dispatch-bench" provider-token --key "$run/AuthKey.p8" --key-id "$key_id" --team "$team")
python3 scripts/bench_dispatcher.py payload "$run/payload.json"
token=$(printf 'ab%.0s' $(seq 1 80))

run_h2load() {
  reset_simulator
  h2load -n "$count" -c 1 -m 100 -t 1 -d "$run/payload.json" \
    -H "authorization: bearer $jwt" -H "apns-push-type: liveactivity" -H "apns-topic: $bundle.push-type.liveactivity" \
    -H "apns-priority: 5" -H "apns-expiration: 0" "https://127.0.0.1:$sim_port/3/device/$token" >"$run/h2load.out" 2>&1
  grep -oE "finished in [0-9.]+m?s, [0-9.]+ req/s" "$run/h2load.out" | grep -oE "[0-9.]+ req/s" | grep -oE "^[0-9.]+"
}
run_aioapns() {
  reset_simulator
  python3 Benchmarks/Dispatcher/aioapns_bench.py --port "$sim_port" --ca "$run/simulator.pem" --key "$run/AuthKey.p8" --key-id "$key_id" \
    --team "$team" --bundle "$bundle" --count "$aio_count" |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print(int(r["requests"]/r["seconds"]) if r["non200"] == 0 else 0)'
}
start_broker() {
  eval "$(scripts/broker.sh)"
  pids+=("$ISLET_BROKER_PID")
  for t in islet.tokens.v1:compact islet.push-requests.v1:delete islet.push-outcomes.v1:delete islet.dlq.v1:delete islet.dispatch-budgets.v1:compact; do
    "$bin/islet-kafka-bench" create-topic --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --topic "${t%%:*}" --partitions 4 >/dev/null
  done
}
start_dispatcher() {
  local port; port=$(free_port)
  ISLET_KAFKA_BOOTSTRAP=$ISLET_KAFKA_BOOTSTRAP ISLET_HTTP_HOST=127.0.0.1 ISLET_HTTP_PORT=$port ISLET_LOG_LEVEL=warning \
    ISLET_APNS_KEYS="$team=$key_id:$run/AuthKey.p8" ISLET_APNS_APPS="$bundle=$team" ISLET_APNS_URL="https://127.0.0.1:$sim_port" \
    ISLET_APNS_CA_FILE="$run/simulator.pem" "${DISPATCHER_BIN:-$bin/apns-dispatcher}" >"$run/dispatcher.log" 2>&1 &
  dispatcher_pid=$!
  pids+=("$dispatcher_pid")
  wait_http "http://127.0.0.1:$port/health"
}
run_dispatcher() {
  start_broker
  "$bin/islet-dispatch-bench" load --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --bundle "$bundle" --activities "$activities" --count "$count" >/dev/null
  reset_simulator
  start_dispatcher
  for _ in $(seq 1 1200); do
    [ "$(stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["accepted"])')" -ge "$count" ] && break
    sleep 0.25
  done
  local rate cpu
  rate=$(stats | python3 scripts/bench_dispatcher.py rate "$count" "$run") || true
  cpu=$(cpu_seconds "$dispatcher_pid")
  cleanup_round
  [ -n "$rate" ] || return 1
  echo "$rate $(python3 -c "print(f'{$cpu / $count * 1e6:.0f}')")"
}
cleanup_round() { kill "$dispatcher_pid" "$ISLET_BROKER_PID" 2>/dev/null || true; wait "$dispatcher_pid" "$ISLET_BROKER_PID" 2>/dev/null || true; }

results="$run/throughput.tsv"
: > "$results"
echo "== throughput: $count pushes of 1 KB over $activities activities, $rounds rounds (aioapns: $aio_count pushes)"
echo "round	dispatcher/s	dispatcher CPU µs/push	h2load/s	aioapns/s"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then d=$(run_dispatcher); h=$(run_h2load); a=$(run_aioapns); else h=$(run_h2load); a=$(run_aioapns); d=$(run_dispatcher); fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$r" "${d% *}" "${d#* }" "$h" "$a" | tee -a "$results"
done

echo "== latency at 1,000 requests/s for $latency_seconds s"
start_broker
"$bin/islet-dispatch-bench" load --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --bundle "$bundle" --activities "$activities" --count 0 >/dev/null
start_dispatcher
# Warm up: the dispatcher has joined its group (the local broker takes about 5 s) and opened its
# connections before timing starts.
reset_simulator
"$bin/islet-dispatch-bench" load --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --bundle "$bundle" --activities "$activities" --count 500 >/dev/null
for _ in $(seq 1 600); do
  [ "$(stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["accepted"])')" -ge 500 ] && break
  sleep 0.1
done
reset_simulator
"$bin/islet-dispatch-bench" paced --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --bundle "$bundle" --activities "$activities" --rate 1000 --seconds "$latency_seconds" \
  --out "$run/paced.txt"
sleep 3
curl -sf "$admin/admin/notifications?payload=false" >"$run/received.json"
cleanup_round

python3 scripts/bench_dispatcher.py summary "$results" "$run/paced.txt" "$run/received.json"
