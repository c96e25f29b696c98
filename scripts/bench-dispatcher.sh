#!/usr/bin/env bash
# apns-dispatcher throughput: pushes per second of one dispatcher instance, from push-requests on
# the broker to a 200 from the server, with 1 KB payloads over many activities, and the CPU time
# each process spends per push. The server is a reference that is not ours: nginx (Debian's, TLS,
# ALPN h2, Benchmarks/Reference/nginx-apns.conf) answering POST /3/device/* with 200 and the
# apns-id. Against the same nginx, in alternating rounds: (a) h2load posting the same 1 KB
# requests with the same headers and a JWT over 2 connections with 100 streams each (the
# dispatcher's connection count), (b) the Python APNs client aioapns (2 connections), (c) the
# dispatcher fed from Kafka. Each round also runs h2load against the project's APNs simulator
# (validation on), next to the same against nginx: what the simulator can carry. Then latency
# (request produced → simulator receipt) at a fixed 1,000 requests/s.
#
#   scripts/bench-dispatcher.sh                  # 3 rounds of 50,000 pushes
#   ROUNDS=5 COUNT=100000 scripts/bench-dispatcher.sh
#   ROUNDS=0 LATENCY_SECONDS=60 scripts/bench-dispatcher.sh   # the latency run only, 60 s instead of 20
#   DISPATCHER_BIN=/path/to/apns-dispatcher scripts/bench-dispatcher.sh   # another build of the dispatcher
#   ALERTING=1 scripts/bench-dispatcher.sh         # every request with an alert: each announced on the
#       outcomes topic (and acknowledged) before it is sent; 0.1: one in ten
#   COMPARE_BIN=/path/to/old/apns-dispatcher ROUNDS=5 scripts/bench-dispatcher.sh
#       A/B: only the dispatcher against nginx, this build and that one in alternating rounds (which
#       goes first alternates too), each round's pushes/s and µs of CPU per push, and the medians
#
# CPU per operation: user + system time (from /proc, or from time(1) for a client) of each
# process of a round divided by the requests: the dispatcher over its whole life (start-up, joining
# the group, reading the backlog), the broker and nginx's worker over the round, h2load and
# aioapns over their run. A rate moves with whatever else the 2-core machine does; CPU per push
# moves far less.
#
# Rates are counted the same way for every client: nginx's access log, requests over the time from
# the first to the last.
set -euo pipefail
shopt -s inherit_errexit  # a failure inside `d=$(run_dispatcher)` fails the script, not just prints 0

# shellcheck source=scripts/lib-bench.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-bench.sh"
run=$ISLET_RUN_DIR/bench-dispatcher
mkdir -p "$run"
rounds=${ROUNDS:-3}  # 0: only the latency run
count=${COUNT:-50000}
aio_count=${AIO_COUNT:-10000}
activities=${ACTIVITIES:-2000}
latency_seconds=${LATENCY_SECONDS:-20}  # the latency run at 1,000 requests/s
alerting=${ALERTING:-0}  # the share of requests with an alert (announced before they are sent)

if ! command -v h2load >/dev/null || ! command -v curl >/dev/null || ! command -v nginx >/dev/null || [ ! -x /usr/bin/time ]; then
  as_root apt-get install -y -q nghttp2-client curl nginx-light time >/dev/null
fi
python3 -c 'import aioapns' 2>/dev/null || python3 -m pip install -q 'aioapns==4.0'
build_release apns-simulator apns-dispatcher
build_benchmarks islet-dispatch-bench islet-kafka-bench
bin=$(swift build -c release --show-bin-path)
bench_bin=$(benchmarks_bin)

key_id=BENCHKEY01; team=BENCHTEAM1; bundle=com.example.bench
"$bench_bin/islet-dispatch-bench" key --out "$run/AuthKey.p8"
sim_port=$(free_port); admin_port=$(free_port)
ISLET_SIMULATOR_KEYS="$key_id=$team:$run/AuthKey.p8" ISLET_SIMULATOR_PORT=$sim_port ISLET_HTTP_PORT=$admin_port \
  ISLET_SIMULATOR_TLS_CERTIFICATE_OUT="$run/simulator.pem" ISLET_SIMULATOR_RECORD_CAPACITY=$((count + 50000)) ISLET_LOG_LEVEL=warning \
  "$bin/apns-simulator" >"$run/simulator.log" 2>&1 &
simulator_pid=$!
pids+=("$simulator_pid")
admin="http://127.0.0.1:$admin_port"
wait_http "$admin/health"
stats() { curl -sf "$admin/admin/stats"; }
reset_simulator() { curl -sf -X DELETE "$admin/admin/notifications" >/dev/null; }

# The reference server: nginx with a certificate of its own for 127.0.0.1.
nginx_port=$(free_port)
rm -rf "$run/nginx-root" "$run/nginx-body"; mkdir -p "$run/nginx-root" "$run/nginx-body"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=127.0.0.1" \
  -addext "subjectAltName=IP:127.0.0.1" -keyout "$run/nginx.key" -out "$run/nginx.pem" 2>/dev/null
sed -e "s#@RUN@#$run#g" -e "s#@PORT@#$nginx_port#g" Benchmarks/Reference/nginx-apns.conf >"$run/nginx.conf"
: >"$run/nginx-access.log"
nginx -c "$run/nginx.conf" -p "$run" >"$run/nginx.out" 2>&1 &
nginx_pid=$!
pids+=("$nginx_pid")
for _ in $(seq 1 100); do
  curl -sf --http2 --cacert "$run/nginx.pem" -X POST -d '{}' "https://127.0.0.1:$nginx_port/3/device/ab" -o /dev/null && break
  sleep 0.1
done
nginx_worker=$(pgrep -P "$nginx_pid" | head -1)
[ -n "$nginx_worker" ] || { echo "nginx did not start: $(cat "$run/nginx.out" "$run/nginx-error.log")" >&2; exit 1; }
nginx_reset() { sleep 1.2; : >"$run/nginx-access.log"; }  # the last round's buffered lines are flushed first
nginx_lines() { wc -l <"$run/nginx-access.log"; }
# Waits until nginx logged COUNT requests (at most 300 s), then prints the rate from its log; fails
# when nginx answered any of them with a status other than 200 (a request the reference did not
# take as a push: a wrong path or method), so that such a round counts for nothing.
nginx_rate() {  # COUNT
  for _ in $(seq 1 3000); do [ "$(nginx_lines)" -ge "$1" ] && break; sleep 0.1; done
  local line; line=$(python3 scripts/bench_dispatcher.py nginx-rate "$1" "$run/nginx-access.log") || return 1
  if [ "${line#* }" != 0 ]; then
    echo "nginx answered ${line#* } requests with a status other than 200 (log: $run/nginx-access.log)" >&2
    return 1
  fi
  echo "${line% *}"
}

# The same request for h2load: one activity's token, a 1 KB update.
jwt=$("$bench_bin/islet-dispatch-bench" provider-token --key "$run/AuthKey.p8" --key-id "$key_id" --team "$team")
python3 scripts/bench_dispatcher.py payload "$run/payload.json"
token=$(printf 'ab%.0s' $(seq 1 80))

# One h2load run: 2 connections with 100 streams each, the dispatcher's connection count.
h2load_to() {  # URL-BASE OUT
  /usr/bin/time -f "%U %S" -o "$2.cpu" h2load -n "$count" -c 2 -m 100 -t 1 -d "$run/payload.json" \
    -H "authorization: bearer $jwt" -H "apns-push-type: liveactivity" -H "apns-topic: $bundle.push-type.liveactivity" \
    -H "apns-priority: 5" -H "apns-expiration: 0" "$1/3/device/$token" >"$2" 2>&1
}
client_cpu() { awk '{print $1 + $2}' "$1"; }  # the "%U %S" time(1) wrote
per_op() { python3 -c "print(f'{$1 / $2 * 1e6:.1f}')"; }  # CPU-SECONDS OPERATIONS → µs per operation

# Each run prints "rate client-µs server-µs [broker-µs]" (µs of CPU per request).
run_h2load() {
  nginx_reset
  local n0 rate; n0=$(cpu_seconds "$nginx_worker")
  h2load_to "https://127.0.0.1:$nginx_port" "$run/h2load.out"
  rate=$(nginx_rate "$count") || return 1
  echo "$rate $(per_op "$(client_cpu "$run/h2load.out.cpu")" "$count") $(per_op "$(cpu_since "$nginx_worker" "$n0")" "$count")"
}
run_h2load_simulator() {
  reset_simulator
  local s0 rate; s0=$(cpu_seconds "$simulator_pid")
  h2load_to "https://127.0.0.1:$sim_port" "$run/h2load-simulator.out"
  rate=$(stats | python3 scripts/bench_dispatcher.py rate "$count" "$run" simulator)
  echo "$rate $(per_op "$(client_cpu "$run/h2load-simulator.out.cpu")" "$count") $(per_op "$(cpu_since "$simulator_pid" "$s0")" "$count")"
}
run_aioapns() {
  nginx_reset
  local n0 rate; n0=$(cpu_seconds "$nginx_worker")
  /usr/bin/time -f "%U %S" -o "$run/aioapns.cpu" python3 Benchmarks/Dispatcher/aioapns_bench.py --port "$nginx_port" --ca "$run/nginx.pem" \
    --key "$run/AuthKey.p8" --key-id "$key_id" --team "$team" --bundle "$bundle" --count "$aio_count" --connections 2 >"$run/aioapns.out"
  # Its warm-up (200 requests) is in the log too: the rate is over the whole run.
  rate=$(nginx_rate "$((aio_count + 200))") || return 1
  echo "$rate $(per_op "$(client_cpu "$run/aioapns.cpu")" "$((aio_count + 200))") $(per_op "$(cpu_since "$nginx_worker" "$n0")" "$((aio_count + 200))")"
}
start_broker() {
  eval "$(scripts/broker.sh)"
  pids+=("$ISLET_BROKER_PID")
  for t in islet.tokens.v1:compact islet.push-requests.v1:delete islet.push-outcomes.v1:delete islet.dlq.v1:delete islet.dispatch-budgets.v1:compact islet.broadcast-channels.v1:compact; do
    "$bench_bin/islet-kafka-bench" create-topic --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --topic "${t%%:*}" --partitions 4 >/dev/null
  done
}
start_dispatcher() {  # APNS-URL CA-FILE
  local port; port=$(free_port)
  ISLET_KAFKA_BOOTSTRAP=$ISLET_KAFKA_BOOTSTRAP ISLET_HTTP_HOST=127.0.0.1 ISLET_HTTP_PORT=$port ISLET_LOG_LEVEL=warning \
    ISLET_APNS_KEYS="$team=$key_id:$run/AuthKey.p8" ISLET_APNS_APPS="$bundle=$team" ISLET_APNS_URL="$1" \
    ISLET_APNS_CA_FILE="$2" "${DISPATCHER_BIN:-$bin/apns-dispatcher}" >"$run/dispatcher.log" 2>&1 &
  dispatcher_pid=$!
  pids+=("$dispatcher_pid")
  wait_http "http://127.0.0.1:$port/health"
}
run_dispatcher() {
  start_broker
  "$bench_bin/islet-dispatch-bench" load --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --bundle "$bundle" --activities "$activities" --count "$count" \
    --alerting "$alerting" >/dev/null
  nginx_reset
  local b0 n0 rate cpu
  b0=$(cpu_seconds "$ISLET_BROKER_PID"); n0=$(cpu_seconds "$nginx_worker")
  start_dispatcher "https://127.0.0.1:$nginx_port" "$run/nginx.pem"
  rate=$(nginx_rate "$count") || true
  cpu=$(cpu_seconds "$dispatcher_pid")
  local broker nginx; broker=$(cpu_since "$ISLET_BROKER_PID" "$b0"); nginx=$(cpu_since "$nginx_worker" "$n0")
  cleanup_round
  [ -n "$rate" ] || { echo "dispatcher round failed (log: $run/dispatcher.log)" >&2; return 1; }
  echo "$rate $(per_op "$cpu" "$count") $(per_op "$nginx" "$count") $(per_op "$broker" "$count")"
}
cleanup_round() { kill "$dispatcher_pid" "$ISLET_BROKER_PID" 2>/dev/null || true; wait "$dispatcher_pid" "$ISLET_BROKER_PID" 2>/dev/null || true; }

if [ -n "${COMPARE_BIN:-}" ]; then
  this_bin=${DISPATCHER_BIN:-$bin/apns-dispatcher}
  echo "== A/B: $count pushes of 1 KB over $activities activities against nginx, $rounds rounds; A $this_bin, B $COMPARE_BIN"
  echo "round	A/s	A µs CPU/push	B/s	B µs CPU/push"
  : >"$run/compare.tsv"
  for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then
      a=$(DISPATCHER_BIN=$this_bin run_dispatcher); b=$(DISPATCHER_BIN=$COMPARE_BIN run_dispatcher)
    else
      b=$(DISPATCHER_BIN=$COMPARE_BIN run_dispatcher); a=$(DISPATCHER_BIN=$this_bin run_dispatcher)
    fi
    read -r a_rate a_cpu _ <<<"$a"; read -r b_rate b_cpu _ <<<"$b"
    printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$a_rate" "$a_cpu" "$b_rate" "$b_cpu" | tee -a "$run/compare.tsv"
  done
  python3 scripts/bench_dispatcher.py compare "$run/compare.tsv"
  exit 0
fi

results="$run/throughput.tsv"
: > "$results"
echo "== throughput: $count pushes of 1 KB over $activities activities, $rounds rounds (aioapns: $aio_count pushes); server: nginx"
echo "round	dispatcher/s	µs CPU/push: dispatcher nginx broker	h2load/s	µs: h2load nginx	aioapns/s	µs: aioapns nginx	simulator under h2load/s	µs: h2load simulator"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then
    d=$(run_dispatcher); h=$(run_h2load); a=$(run_aioapns); s=$(run_h2load_simulator)
  else
    s=$(run_h2load_simulator); a=$(run_aioapns); h=$(run_h2load); d=$(run_dispatcher)
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$d" "$h" "$a" "$s" | tee -a "$results"
done

echo "== latency at 1,000 requests/s for $latency_seconds s"
start_broker
"$bench_bin/islet-dispatch-bench" load --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --bundle "$bundle" --activities "$activities" --count 0 >/dev/null
start_dispatcher "https://127.0.0.1:$sim_port" "$run/simulator.pem"
# Warm up: the dispatcher has joined its group (the local broker takes about 5 s) and opened its
# connections before timing starts.
reset_simulator
"$bench_bin/islet-dispatch-bench" load --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --bundle "$bundle" --activities "$activities" --count 500 >/dev/null
for _ in $(seq 1 600); do
  [ "$(stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["accepted"])')" -ge 500 ] && break
  sleep 0.1
done
reset_simulator
"$bench_bin/islet-dispatch-bench" paced --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --bundle "$bundle" --activities "$activities" --rate 1000 --seconds "$latency_seconds" \
  --out "$run/paced.txt"
sleep 3
curl -sf "$admin/admin/notifications?payload=false" >"$run/received.json"
cleanup_round

python3 scripts/bench_dispatcher.py summary "$results" "$run/paced.txt" "$run/received.json"
