#!/usr/bin/env bash
# apns-dispatcher's and content-service's partitions at scale (issue 24): resident memory per live
# activity at a large count, restore time per 100,000 activities, memory of one and of two
# instances, and the restore after a kill -9. The records are loaded straight onto the topics;
# scripts/bench-scale-stack.sh does the same through the product's API and Kafka, at 100,000. On its own broker (tansu, in memory) with Islet's activity topics at
# PARTITIONS partitions:
#
#   1. an apns-dispatcher against an EMPTY token topic: its VmRSS is the baseline;
#   2. COUNT update-token records (and, unless BUDGETS=0, a spent budget per activity on
#      islet.dispatch-budgets.v1, read and held by the dispatcher with the tokens) (TokenRecord JSON, 80-byte tokens, three apps) written STRAIGHT
#      onto islet.tokens.v1 with confluent-kafka (Python, in a venv under the run dir), each to the
#      partition Islet's partitioner gives its key (murmur2 of the activity id, checked first
#      against librdkafka's murmur2_random); NOT through token-registry's API, which at 1,000,000
#      would take far longer (46 s per 100,000 in bench-memory.sh) and measures token-registry,
#      not the dispatcher's state;
#   3. instance A (release build) until its /metrics shows islet_tokens_table_size == COUNT and
#      /health is 200: the restore's seconds (its "token partitions restored" log line), the time
#      from its start, its CPU seconds, VmRSS and VmHWM; bytes per activity = (RSS − baseline) / COUNT;
#   4. instance B in the same consumer group, until the two hold COUNT between them, each a part:
#      both RSS and token counts (A's RSS need not fall: malloc keeps what it freed);
#   5. kill -9 of one of them (KILL=a, the default, or b): the time until the survivor holds COUNT
#      again (the session timeout, 10 s, passes first) and its RSS then;
#   6. a table and one line `RESULT scale count=… partitions=… load_s=… restore_s=… …`.
# No push request is produced: the dispatcher never connects to APNs (ISLET_APNS_URL points nowhere).
#
# Then content-service (unless CONTENT=0), on the same broker and tokens:
#   7. a memory for each of the COUNT activities (ContentMemoryRecord JSON: an update delivered a
#      few minutes ago, its request stored) written straight onto islet.content-memory.v1, in the
#      activity's partition, and a checkpoint per partition (the requests and outcomes topics are
#      empty), as the changelog of an instance that ran before holds them;
#   8. content-service A (release build, MALLOC_ARENA_MAX=2 as docker-compose.yml runs it, unless the
#      environment sets another) until /health is 200 and its log says it restored the partitions
#      it was assigned (every one) with COUNT activities: restore seconds (changelog, then the
#      records after the checkpoints), VmRSS right then and 35 s later (after a pass of FreeMemory,
#      which gives malloc's free pages back every 30 s); bytes per activity = (RSS − the RSS of an
#      instance against empty topics) / COUNT;
#   9. content-service B in the same group, until A and B hold COUNT between them, each a part (B
#      restores the partitions it is given; A keeps those it gets back and forgets the others):
#      both RSS and counts; then a kill -9 of A: the time until B holds COUNT again (the session
#      timeout, 10 s, passes first), its restore seconds, its VmRSS then and 35 s later.
# Its line: `RESULT scale-content count=… restore_s=… rss_mb_one=… bytes_per_activity=… …`.
#
#   scripts/bench-scale.sh                          # 1,000,000 activities, 12 partitions
#   COUNT=100000 scripts/bench-scale.sh             # a quick run
#   COUNT=500000 PARTITIONS=6 KILL=b scripts/bench-scale.sh
#   DISPATCHER_BIN=/path/to/apns-dispatcher scripts/bench-scale.sh   # another build (no build step)
#
# Bounds: every wait gives up after WAIT_SECONDS (default 300) and fails the run; the broker is
# stopped and the run fails if its resident memory passes BROKER_MAX_MB (default 12,000 of this
# machine's 24 GiB). At 1,000,000 on a 2-core machine the whole run takes under 3 minutes after the
# build (2026-11-26: 165 s; loading 19 s, tansu then about 690 MB). Everything started here is
# stopped on exit (SIGKILL), whatever happens. Output under $ISLET_RUN_DIR/bench-scale (logs of the
# broker and each instance, load.json, results.json); each run replaces the last.
#
# The environment reaches every process started: MALLOC_ARENA_MAX=2 shows how much of an instance's
# memory after a rebalance is glibc's per-thread arenas keeping what the dropped partitions freed.
set -euo pipefail
shopt -s inherit_errexit

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$repo/scripts/lib.sh"
cd "$repo"
export ISLET_RUN_DIR=${ISLET_RUN_DIR:-$repo/.islet-run}
run=$ISLET_RUN_DIR/bench-scale
count=${COUNT:-1000000}
partitions=${PARTITIONS:-12}
wait_seconds=${WAIT_SECONDS:-300}
broker_max_mb=${BROKER_MAX_MB:-12000}
kill_which=${KILL:-a}
settle=${SETTLE_SECONDS:-5}  # after a table is full, before memory is read
case "$kill_which" in a | b) ;; *) echo "KILL must be a or b" >&2; exit 1 ;; esac
rm -rf "$run"
mkdir -p "$run"
started_at=$(date +%s)

scripts/bootstrap.sh >/dev/null
venv=$ISLET_RUN_DIR/bench-scale-venv
if ! "$venv/bin/python" -c 'import confluent_kafka' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'confluent-kafka==2.16.1'
fi
py=("$venv/bin/python" scripts/bench_scale.py)
if [ -n "${DISPATCHER_BIN:-}" ]; then
  dispatcher=$DISPATCHER_BIN
else
  build_release apns-dispatcher
  dispatcher=$(swift build -c release --show-bin-path)/apns-dispatcher
fi
content=${CONTENT:-1}
# BUDGETS=1 (the default): every activity also has a spent budget on islet.dispatch-budgets.v1,
# which the dispatcher reads with the tokens and holds (the worst case: every activity sent
# priority-10 pushes within the hour). BUDGETS=0: tokens only.
budgets=${BUDGETS:-1}
if [ "$content" = 1 ]; then
  build_release content-service
  content_bin=$(swift build -c release --show-bin-path)/content-service
fi

pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$(now) - $1:.2f}')"; }  # seconds since $1
status_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }  # pid, VmRSS|VmHWM
note() { printf '[%4ds] %s\n' $(($(date +%s) - started_at)) "$*"; }
fail() { echo "bench-scale: $*" >&2; exit 1; }

# The broker, its topics, and a watchdog on its memory.
eval "$(ISLET_RUN_DIR=$run scripts/broker.sh)"
pids+=("$ISLET_BROKER_PID")
broker=$ISLET_BROKER_PID
(
  while kill -0 "$broker" 2>/dev/null; do
    if [ "$(status_kb "$broker" VmRSS)" -gt $((broker_max_mb * 1024)) ]; then
      echo "broker passed BROKER_MAX_MB=$broker_max_mb: stopped" >"$run/broker-too-big"
      kill -9 "$broker"
    fi
    sleep 1
  done
) &
pids+=("$!")
broker_alive() {
  if [ -e "$run/broker-too-big" ] || ! kill -0 "$broker" 2>/dev/null; then
    fail "the broker is gone: $(cat "$run/broker-too-big" 2>/dev/null || echo "it exited; see $run/broker.log")"
  fi
}
"${py[@]}" topics "$ISLET_KAFKA_BOOTSTRAP" "$partitions"
"${py[@]}" check-partitioner "$ISLET_KAFKA_BOOTSTRAP" "$partitions"

# A P-256 key in PKCS#8 PEM (what an AuthKey .p8 is): the dispatcher insists on one, never uses it here.
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$run/AuthKey.p8" 2>/dev/null
declare -A port pid
start_instance() {  # name
  port[$1]=$(free_port)
  ISLET_KAFKA_BOOTSTRAP=$ISLET_KAFKA_BOOTSTRAP ISLET_HTTP_HOST=127.0.0.1 ISLET_HTTP_PORT=${port[$1]} ISLET_LOG_LEVEL=info \
    ISLET_APNS_KEYS="BENCHTEAM1=BENCHKEY01:$run/AuthKey.p8" \
    ISLET_APNS_APPS="com.example.fooddelivery=BENCHTEAM1,com.example.rides=BENCHTEAM1,com.example.sports=BENCHTEAM1" \
    ISLET_APNS_URL="https://127.0.0.1:9" "$dispatcher" >"$run/dispatcher-$1.log" 2>&1 &
  pid[$1]=$!
  pids+=("${pid[$1]}")
}
tokens_of() { local m; m=$("${py[@]}" metrics "http://127.0.0.1:${port[$1]}/metrics"); echo "${m%% *}"; }
ready() { curl -sf -o /dev/null "http://127.0.0.1:${port[$1]}/health"; }
# The restore.seconds of the instance's Nth "token partitions restored" line (1-based), or nothing.
restore_seconds() {
  grep 'token partitions restored' "$run/dispatcher-$1.log" | sed -n "$2p" | grep -oE 'restore\.seconds=[0-9.e+-]+' | cut -d= -f2 | awk '{ printf "%.3f", $1 }'
}
restored_lines() { grep -c 'token partitions restored' "$run/dispatcher-$1.log" || true; }
alive() { kill -0 "${pid[$1]}" 2>/dev/null || fail "instance $1 exited; its log: $run/dispatcher-$1.log"; }
# Waits until CONDITION (a command) holds; fails past WAIT_SECONDS.
wait_until() {  # what, condition…
  local what=$1 deadline=$(($(date +%s) + wait_seconds))
  shift
  until "$@"; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "$what: not within WAIT_SECONDS=$wait_seconds"
    broker_alive
    sleep 0.2
  done
}

# 1. Baseline: an instance against the empty token topic.
note "baseline: an instance against an empty token topic"
start_instance base
base_full() { alive base; ready base && [ "$(tokens_of base)" = 0 ] && [ "$(restored_lines base)" -ge 1 ]; }
wait_until "baseline instance ready" base_full
sleep "$settle"
rss_base=$(status_kb "${pid[base]}" VmRSS); hwm_base=$(status_kb "${pid[base]}" VmHWM); cpu_base=$(cpu_seconds "${pid[base]}")
note "baseline: VmRSS $((rss_base / 1024)) MB, VmHWM $((hwm_base / 1024)) MB, $cpu_base CPU s"
kill "${pid[base]}"; wait "${pid[base]}" 2>/dev/null || true  # leaves the group: no session timeout for A

# content-service's baseline against the same empty topics.
start_content() {  # name
  port[$1]=$(free_port)
  MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX:-2} \
    ISLET_KAFKA_BOOTSTRAP=$ISLET_KAFKA_BOOTSTRAP ISLET_HTTP_HOST=127.0.0.1 ISLET_HTTP_PORT=${port[$1]} ISLET_GRPC_PORT=$(free_port) \
    ISLET_LOG_LEVEL=info ISLET_LINK_KEYS="bench=a-benchmark-link-key-of-32-bytes!" "$content_bin" >"$run/content-$1.log" 2>&1 &
  pid[$1]=$!
  pids+=("${pid[$1]}")
}
# The activities a content-service instance holds: those of its last restore or forget log line, or nothing.
rebuilt_activities() {
  grep -E 'partitions restored|memories of partitions gone' "$run/content-$1.log" | tail -1 | grep -oE ' activities=[0-9]+' | cut -d= -f2
}
log_seconds() {  # name, line, field
  grep "$2" "$run/content-$1.log" | tail -1 | grep -oE "$3=[0-9.e+-]+" | cut -d= -f2 | awk '{ printf "%.2f", $1 }'
}
content_alive() { kill -0 "${pid[$1]}" 2>/dev/null || fail "content-service $1 exited; its log: $run/content-$1.log"; }
if [ "$content" = 1 ]; then
  note "content-service baseline: an instance against empty topics"
  start_content cbase
  cbase_ready() { content_alive cbase; ready cbase && [ "$(rebuilt_activities cbase)" = 0 ]; }
  wait_until "content-service baseline ready" cbase_ready
  sleep 35
  rss_cbase=$(status_kb "${pid[cbase]}" VmRSS)
  note "content-service baseline: VmRSS $((rss_cbase / 1024)) MB"
  kill "${pid[cbase]}"; wait "${pid[cbase]}" 2>/dev/null || true
fi

# 2. The tokens, straight onto the topic.
note "loading $count token records straight onto islet.tokens.v1 (not through token-registry's API)"
"${py[@]}" load "$ISLET_KAFKA_BOOTSTRAP" "$count" "$partitions" "$budgets" >"$run/load.json"
broker_alive
load_s=$(python3 -c "import json; print(json.load(open('$run/load.json'))['seconds'])")
load_bytes=$(python3 -c "import json; print(json.load(open('$run/load.json'))['bytes'])")
note "loaded in $load_s s ($(python3 -c "print(f'{$count / $load_s:,.0f}')") records/s; broker VmRSS $(($(status_kb "$broker" VmRSS) / 1024)) MB)"

# 3. Instance A restores every partition.
broker_cpu0=$(cpu_seconds "$broker")
t0=$(now)
start_instance a
full() { alive "$1"; ready "$1" && [ "$(tokens_of "$1")" = "$count" ]; }
wait_until "instance A holding $count tokens" full a
ready_s=$(elapsed "$t0")
cpu_one=$(cpu_seconds "${pid[a]}")
broker_cpu=$(python3 -c "print($(cpu_seconds "$broker") - $broker_cpu0)")
restore_s=$(restore_seconds a 1)
[ -n "$restore_s" ] || { grep -i 'token' "$run/dispatcher-a.log" | tail -3 >&2; restore_s=$ready_s; echo "no 'token partitions restored' line (past the loader's 30 s wait?): restore_s is the time from start" >&2; }
note "A holds $count tokens: restore $restore_s s (log), $ready_s s after start, $cpu_one CPU s"
sleep "$settle"
rss_one=$(status_kb "${pid[a]}" VmRSS); hwm_one=$(status_kb "${pid[a]}" VmHWM)
broker_rss=$(status_kb "$broker" VmRSS)
note "A: VmRSS $((rss_one / 1024)) MB, VmHWM $((hwm_one / 1024)) MB"

# 4. Instance B joins the group.
lines_a=$(restored_lines a)
t1=$(now)
start_instance b
split() {
  alive a; alive b
  ready a && ready b || return 1
  tokens_a=$(tokens_of a); tokens_b=$(tokens_of b)
  [ "${tokens_a%.*}" -gt 0 ] && [ "${tokens_b%.*}" -gt 0 ] && [ $((${tokens_a%.*} + ${tokens_b%.*})) -eq "$count" ] &&
    [ "$(restored_lines a)" -gt "$lines_a" ] && [ "$(restored_lines b)" -ge 1 ]
}
wait_until "A and B splitting the $count tokens" split
rebalance_s=$(elapsed "$t1")
restore_b_s=$(restore_seconds b 1)
restore_a2_s=$(restore_seconds a $((lines_a + 1)))
note "A holds $tokens_a, B holds $tokens_b, $rebalance_s s after B started (restores: A $restore_a2_s s, B $restore_b_s s)"
sleep "$settle"
rss_two_a=$(status_kb "${pid[a]}" VmRSS); hwm_two_a=$(status_kb "${pid[a]}" VmHWM)
rss_two_b=$(status_kb "${pid[b]}" VmRSS); hwm_two_b=$(status_kb "${pid[b]}" VmHWM)
note "A: VmRSS $((rss_two_a / 1024)) MB; B: VmRSS $((rss_two_b / 1024)) MB"

# 5. kill -9 of one; the other takes every partition after the session timeout.
if [ "$kill_which" = a ]; then victim=a survivor=b; else victim=b survivor=a; fi
lines_s=$(restored_lines "$survivor")
t2=$(now)
kill -9 "${pid[$victim]}"
wait "${pid[$victim]}" 2>/dev/null || true
note "kill -9 of ${victim^^}"
taken_over() { full "$survivor" && [ "$(restored_lines "$survivor")" -gt "$lines_s" ]; }
wait_until "${survivor^^} holding all $count tokens again" taken_over
failover_s=$(elapsed "$t2")
failover_restore_s=$(restore_seconds "$survivor" $((lines_s + 1)))
failover_partitions=$(grep 'token partitions restored' "$run/dispatcher-$survivor.log" | sed -n "$((lines_s + 1))p" | grep -oE 'kafka\.partitions\.read=\[[0-9, ]*\]' || true)
note "${survivor^^} holds $count tokens $failover_s s after the kill (restore $failover_restore_s s of $failover_partitions)"
sleep "$settle"
rss_after=$(status_kb "${pid[$survivor]}" VmRSS); hwm_after=$(status_kb "${pid[$survivor]}" VmHWM)

cat >"$run/results.json" <<EOF
{"count": $count, "partitions": $partitions, "load_s": $load_s, "load_bytes": $load_bytes, "budgets": $budgets,
 "rss_base_kb": $rss_base, "hwm_base_kb": $hwm_base,
 "restore_s": $restore_s, "ready_s": $ready_s, "restore_cpu_s": $(python3 -c "print($cpu_one - $cpu_base)"), "broker_cpu_restore_s": $broker_cpu,
 "rss_one_kb": $rss_one, "hwm_one_kb": $hwm_one, "tokens_one": $count, "broker_rss_kb": $broker_rss,
 "rss_two_a_kb": $rss_two_a, "hwm_two_a_kb": $hwm_two_a, "tokens_two_a": ${tokens_a%.*},
 "rss_two_b_kb": $rss_two_b, "hwm_two_b_kb": $hwm_two_b, "tokens_two_b": ${tokens_b%.*},
 "rebalance_s": $rebalance_s, "restore_b_s": ${restore_b_s:-0}, "restore_a2_s": ${restore_a2_s:-0},
 "survivor": "${survivor^^}", "failover_s": $failover_s, "failover_restore_s": ${failover_restore_s:-0},
 "rss_after_kb": $rss_after, "hwm_after_kb": $hwm_after, "tokens_after": $count}
EOF
python3 scripts/bench_scale.py summary "$run/results.json"
echo "(restore_cpu_s: A's CPU seconds when it held every token less the baseline instance's at its start; the tokens were"
echo " written straight onto islet.tokens.v1, not through token-registry's API)"
[ "$content" = 1 ] || { echo "(whole run $(($(date +%s) - started_at)) s)"; exit 0; }

# 7. content-service's changelog, as an instance that ran before left it.
kill -9 "${pid[$survivor]}"; wait "${pid[$survivor]}" 2>/dev/null || true
note "loading $count activity memories straight onto islet.content-memory.v1"
"${py[@]}" load-memory "$ISLET_KAFKA_BOOTSTRAP" "$count" "$partitions" >"$run/load-memory.json"
broker_alive
memory_load_s=$(python3 -c "import json; print(json.load(open('$run/load-memory.json'))['seconds'])")
note "loaded in $memory_load_s s (broker VmRSS $(($(status_kb "$broker" VmRSS) / 1024)) MB)"

# 8. content-service A restores the token table and, assigned every partition, every memory.
holds_all() { content_alive "$1"; ready "$1" && [ "$(rebuilt_activities "$1")" = "$count" ]; }
t3=$(now)
start_content ca
wait_until "content-service A holding $count memories" holds_all ca
content_ready_s=$(elapsed "$t3")
content_cpu=$(cpu_seconds "${pid[ca]}")
changelog_s=$(log_seconds ca 'partitions restored' changelog.seconds)
rebuild_s=$(log_seconds ca 'partitions restored' restore.seconds)
rss_ca_ready=$(status_kb "${pid[ca]}" VmRSS); hwm_ca=$(status_kb "${pid[ca]}" VmHWM)
note "content-service A holds $count memories: changelog read in $changelog_s s, partitions restored in $rebuild_s s, holding them $content_ready_s s after start, $content_cpu CPU s; VmRSS $((rss_ca_ready / 1024)) MB"
sleep 35
rss_ca=$(status_kb "${pid[ca]}" VmRSS)
note "content-service A 35 s later: VmRSS $((rss_ca / 1024)) MB (VmHWM $((hwm_ca / 1024)) MB)"

# 9. B joins: the two share the partitions; then a kill -9 of A.
split_held() {
  content_alive ca; content_alive cb
  local a b
  a=$(rebuilt_activities ca); b=$(rebuilt_activities cb)
  [ -n "$a" ] && [ -n "$b" ] && [ "$a" -gt 0 ] && [ "$b" -gt 0 ] && [ $((a + b)) = "$count" ]
}
t4=$(now)
start_content cb
wait_until "content-service A and B holding $count memories between them" split_held
content_b_ready_s=$(elapsed "$t4")
changelog_b_s=$(log_seconds cb 'partitions restored' restore.seconds)
held_a=$(rebuilt_activities ca); held_b=$(rebuilt_activities cb)
sleep 35
rss_ca_two=$(status_kb "${pid[ca]}" VmRSS); rss_cb=$(status_kb "${pid[cb]}" VmRSS)
note "two instances: A holds $held_a, VmRSS $((rss_ca_two / 1024)) MB; B holds $held_b, VmRSS $((rss_cb / 1024)) MB (B's share restored in $changelog_b_s s, $content_b_ready_s s after its start)"
t5=$(now)
kill -9 "${pid[ca]}"; wait "${pid[ca]}" 2>/dev/null || true
wait_until "content-service B holding $count memories after A's kill -9" holds_all cb
failover_s=$(elapsed "$t5")
restore_after_s=$(log_seconds cb 'partitions restored' restore.seconds)
rss_cb_after=$(status_kb "${pid[cb]}" VmRSS)
note "kill -9 of content-service A: B holds $count memories $failover_s s later (the session timeout, 10 s, then A's partitions restored in $restore_after_s s), VmRSS $((rss_cb_after / 1024)) MB"
# Its first round writes every memory of the partitions it gained (their changelog is its now):
# the buffers of that round are freed, and given back by the next pass of FreeMemory.
sleep 35
rss_cb_settled=$(status_kb "${pid[cb]}" VmRSS)
note "content-service B 35 s later: VmRSS $((rss_cb_settled / 1024)) MB"

content_per=$(python3 -c "print(round(($rss_ca - $rss_cbase) * 1024 / $count))")
content_per_ready=$(python3 -c "print(round(($rss_ca_ready - $rss_cbase) * 1024 / $count))")
echo
echo "== content-service at $count live activities, $partitions partitions (tansu, in memory)"
echo "memories written straight onto islet.content-memory.v1: $memory_load_s s; tokens as above"
printf '%-44s %10s\n' "" VmRSS
printf '%-44s %7.1f MB\n' "an instance against empty topics" "$(python3 -c "print($rss_cbase / 1024)")"
printf '%-44s %7.1f MB  restore: changelog %s s, ready %s s after start, %s CPU s\n' "one instance, when ready" \
  "$(python3 -c "print($rss_ca_ready / 1024)")" "$changelog_s" "$content_ready_s" "$content_cpu"
printf '%-44s %7.1f MB  (VmHWM %.1f MB)\n' "one instance, 35 s later" "$(python3 -c "print($rss_ca / 1024)")" "$(python3 -c "print($hwm_ca / 1024)")"
printf '%-44s %7.1f MB / %.1f MB  (holding %s / %s activities)\n' "two instances: A / B" \
  "$(python3 -c "print($rss_ca_two / 1024)")" "$(python3 -c "print($rss_cb / 1024)")" "$held_a" "$held_b"
printf '%-44s %7.1f MB  (holding all %s again %s s after the kill; A'"'"'s partitions restored in %s s)\n' \
  "B after a kill -9 of A" "$(python3 -c "print($rss_cb_after / 1024)")" "$count" "$failover_s" "$restore_after_s"
printf '%-44s %7.1f MB\n' "B 35 s later" "$(python3 -c "print($rss_cb_settled / 1024)")"
echo "per live activity: $content_per bytes resident ($content_per_ready when ready, before malloc's free pages were given back)"
echo "RESULT scale-content count=$count partitions=$partitions memory_load_s=$memory_load_s changelog_s=$changelog_s ready_s=$content_ready_s" \
  "cpu_s=$content_cpu rss_mb_base=$(python3 -c "print(round($rss_cbase / 1024, 1))") rss_mb_one=$(python3 -c "print(round($rss_ca / 1024, 1))")" \
  "rss_mb_one_ready=$(python3 -c "print(round($rss_ca_ready / 1024, 1))") bytes_per_activity=$content_per bytes_per_activity_ready=$content_per_ready" \
  "rss_mb_two_a=$(python3 -c "print(round($rss_ca_two / 1024, 1))") rss_mb_two_b=$(python3 -c "print(round($rss_cb / 1024, 1))")" \
  "held_two_a=$held_a held_two_b=$held_b restore_b_s=$changelog_b_s failover_s=$failover_s restore_after_kill_s=$restore_after_s" \
  "restore_s_per_100k=$(python3 -c "print(round($rebuild_s / $count * 100000, 2))") rss_mb_after=$(python3 -c "print(round($rss_cb_after / 1024, 1))")" \
  "rss_mb_after_settled=$(python3 -c "print(round($rss_cb_settled / 1024, 1))")"
echo "(whole run $(($(date +%s) - started_at)) s)"
