#!/usr/bin/env bash
# Sends COUNT pushes with AsyncHTTPClient (HTTP/2, one client, CONCURRENCY in flight, a deadline on
# each) straight to the APNs simulator, whose HTTP/2 server has SwiftNIO's rapid-reset guard, and
# prints the client's answers and the simulator's stats. More connections than one, or errors,
# mean the server sent GOAWAY: the client reset streams it should not have. apns-dispatcher uses
# SwiftNIO's HTTP/2 directly for this reason (docs/apns-dispatcher.md).
#
#   scripts/repro-ahc-rapid-reset.sh            # 50,000 pushes, 100 in flight
#   COUNT=200000 scripts/repro-ahc-rapid-reset.sh
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$repo/scripts/lib.sh"
cd "$repo"
export ISLET_RUN_DIR=${ISLET_RUN_DIR:-$repo/.islet-run}
run=$ISLET_RUN_DIR/repro-ahc
mkdir -p "$run"
count=${COUNT:-50000}
concurrency=${CONCURRENCY:-100}

scripts/bootstrap.sh
swift build -c release --product apns-simulator >/dev/null
swift build -c release --package-path Benchmarks --product islet-dispatch-bench >/dev/null
bin=$(swift build -c release --show-bin-path)
bench_bin=$(benchmarks_bin)

key_id=REPROKEY01; team=REPROTEAM1
"$bench_bin/islet-dispatch-bench" key --out "$run/AuthKey.p8"
sim_port=$(free_port); admin_port=$(free_port)
ISLET_SIMULATOR_KEYS="$key_id=$team:$run/AuthKey.p8" ISLET_SIMULATOR_PORT=$sim_port ISLET_HTTP_PORT=$admin_port \
  ISLET_SIMULATOR_TLS_CERTIFICATE_OUT="$run/simulator.pem" ISLET_SIMULATOR_RECORD_CAPACITY=1000 ISLET_LOG_LEVEL=warning \
  "$bin/apns-simulator" >"$run/simulator.log" 2>&1 &
sim_pid=$!
trap 'stop_pids "$sim_pid"' EXIT INT TERM
wait_http "http://127.0.0.1:$admin_port/health" 300 || true  # the client run below shows what went wrong

echo "== AsyncHTTPClient: $count pushes, $concurrency in flight"
"$bench_bin/islet-dispatch-bench" ahc --url "https://127.0.0.1:$sim_port" --ca "$run/simulator.pem" --key "$run/AuthKey.p8" \
  --key-id "$key_id" --team "$team" --count "$count" --concurrency "$concurrency"
echo "== the simulator's stats"
curl -sf "http://127.0.0.1:$admin_port/admin/stats"; echo
