#!/usr/bin/env bash
# Every benchmark of the product next to its reference, one after the other in one run, then the
# generated section of docs/PERFORMANCE.md (between <!-- bench-report:begin --> and
# <!-- bench-report:end -->) rewritten: the date, the machine, the command and one table.
#
#   scripts/bench-report.sh                    # every benchmark at its full size
#   QUICK=1 scripts/bench-report.sh            # the smallest sizes: checks the script, measures nothing
#   REPORT_ONLY=1 scripts/bench-report.sh      # re-read the saved logs and rewrite the section; runs nothing
#   BENCHES="kafka e2e" scripts/bench-report.sh   # only some (the others' rows say "not run")
#
# Benchmarks, in order: kafka registry dispatcher content analytics e2e memory (scripts/bench-<name>.sh;
# memory when scripts/bench-memory.sh exists). Each one's sizes: <NAME>_<VARIABLE> if set
# (KAFKA_ROUNDS=3, KAFKA_COUNT_SMALL, REGISTRY_DURATION=10, DISPATCHER_COUNT=20000,
# DISPATCHER_LATENCY_SECONDS, CONTENT_EVENTS, ANALYTICS_CONNECTIONS, E2E_SECONDS=60, E2E_RATE,
# E2E_ACTIVITIES, MEMORY_ACTIVITIES, MEMORY_RATE…: the variables each bench script reads, prefixed),
# else the QUICK size, else the variable itself if set (ROUNDS=3 goes to every script that reads
# ROUNDS), else the script's default. Every script's full output is kept in $ISLET_RUN_DIR/bench-report/<name>.log
# (with status.tsv, meta.tsv and section.md). A benchmark that fails, or runs longer than
# BENCH_TIMEOUT seconds (3600), does not stop the others: its row says so; the script then exits 1,
# as it does when a log has no figures to read. REPORT_DOC=<file> writes the section to another copy
# of the document (it must hold the two markers).
#
# The figures come from the machine-readable lines the bench scripts print last
# (result<TAB>name<TAB>islet<TAB>reference<TAB>ratio[<TAB>key=value…], latency<TAB>name<TAB>p50<TAB>p90<TAB>p99<TAB>max<TAB>received<TAB>sent,
# memory<TAB>service<TAB>bytes-per-activity<TAB>baseline-rss<TAB>rss-at-100k) and, from bench-e2e.sh,
# detail<TAB>broker<TAB>text (where the end-to-end time went).
set -uo pipefail  # no -e: a failing benchmark must not stop the others

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
if [ $# -gt 0 ]; then sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; fi
user_run_dir=${ISLET_RUN_DIR:-}
export ISLET_RUN_DIR=${ISLET_RUN_DIR:-$repo/.islet-run}
dir=$ISLET_RUN_DIR/bench-report
doc=${REPORT_DOC:-docs/PERFORMANCE.md}
quick=${QUICK:-0}
report_only=${REPORT_ONLY:-0}
limit=${BENCH_TIMEOUT:-3600}
all=(kafka registry dispatcher content analytics e2e memory)
read -r -a chosen <<<"${BENCHES:-${all[*]}}"
for name in "${chosen[@]}"; do
  case " ${all[*]} " in *" $name "*) ;; *) echo "BENCHES: unknown benchmark '$name' (known: ${all[*]})" >&2; exit 2 ;; esac
done
mkdir -p "$dir"

# A path for the report: relative to the repository when inside it, never the machine's absolute path.
show() {
  case "$1" in
    "$repo"/*) echo "${1#"$repo"/}" ;;
    "$ISLET_RUN_DIR"/*) echo "\$ISLET_RUN_DIR/${1#"$ISLET_RUN_DIR"/}" ;;
    *) echo "$1" ;;
  esac
}

# The command line this run stands for: the variables that shape it, then the script.
command_line() {
  local words=() v
  for v in $(compgen -e | sort); do
    case "$v" in
      QUICK | BENCHES | BENCH_TIMEOUT | ROUNDS | OPEN_ROUNDS | COUNT_SMALL | COUNT_LARGE | COUNT | AIO_COUNT | ACTIVITIES | LATENCY_SECONDS | \
        DURATION | CONNECTIONS | EVENTS | KAFKA_* | REGISTRY_* | DISPATCHER_* | CONTENT_* | ANALYTICS_* | E2E_* | MEMORY_* | ISLET_*) ;;
      *) continue ;;
    esac
    case "$v" in ISLET_RUN_DIR | ISLET_TOOLS) continue ;; esac  # paths: the run directory is added below
    words+=("$(printf '%q' "$v=${!v}")")
  done
  if [ -n "$user_run_dir" ]; then
    case "$user_run_dir" in "$repo"/*) words=("ISLET_RUN_DIR=${user_run_dir#"$repo"/}" "${words[@]}") ;;
      /*) words=("ISLET_RUN_DIR=(outside the repository)" "${words[@]}") ;; *) words=("ISLET_RUN_DIR=$user_run_dir" "${words[@]}") ;; esac
  fi
  echo "${words[*]+${words[*]} }scripts/bench-report.sh"
}

# One of a benchmark's sizes: <PREFIX>_<VARIABLE>, else the QUICK size, else (when the variable is
# shared by the bench scripts) the variable from the environment; empty: the script's default.
pick() {  # prefix variable quick-size shared(yes/no)
  local own="${1}_$2"
  if [ -n "${!own:-}" ]; then echo "${!own}"
  elif [ "$quick" = 1 ] && [ -n "$3" ]; then echo "$3"
  elif [ "$4" = yes ] && [ -n "${!2:-}" ]; then echo "${!2}"
  fi
}
settings=()
setting() {  # prefix variable quick-size: appends VARIABLE=value to $settings when there is one
  local value; value=$(pick "$1" "$2" "$3" yes)
  if [ -n "$value" ]; then settings+=("$2=$value"); fi
}

child=""
on_signal() {
  if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; fi
  echo "bench-report: interrupted" >&2
  exit 130
}
trap on_signal INT TERM

# Runs one benchmark with $settings in its environment, its output in <name>.log, under a time limit
# (timeout runs it in its own process group and ends the whole group: brokers and services too).
run_one() {  # name command…
  local name=$1; shift
  local log="$dir/$name.log" cmd started rc elapsed
  cmd=$(printf '%q ' "${settings[@]}" "$@"); cmd=${cmd% }
  echo "== $name: $cmd   (log: $(show "$log"))"
  started=$(date +%s)
  env "${settings[@]}" timeout -k 30 "$limit" "$@" >"$log" 2>&1 </dev/null &
  child=$!
  wait "$child"; rc=$?
  child=""
  elapsed=$(($(date +%s) - started))
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "bench-report: stopped after BENCH_TIMEOUT=$limit s (exit $rc)" >>"$log"; fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$elapsed" "$cmd" >>"$dir/status.tsv"
  if [ "$rc" -eq 0 ]; then
    echo "   done in ${elapsed} s"
  else
    echo "   FAILED (exit $rc) after ${elapsed} s; the end of $(show "$log"):"
    grep -v -e 'CMakeLists.txt' -e 'which are unhandled' "$log" | tail -5 | sed 's/^/   | /'
  fi
}

bench_kafka() {
  settings=(); setting KAFKA ROUNDS 1; setting KAFKA COUNT_SMALL 20000; setting KAFKA COUNT_LARGE 5000
  run_one kafka scripts/bench-kafka.sh
}
bench_registry() {
  settings=(); setting REGISTRY ROUNDS 1; setting REGISTRY DURATION 3; setting REGISTRY CONNECTIONS ""
  run_one registry scripts/bench-registry.sh
}
bench_dispatcher() {
  settings=(); setting DISPATCHER ROUNDS 1; setting DISPATCHER COUNT 2000; setting DISPATCHER AIO_COUNT 500
  setting DISPATCHER ACTIVITIES ""; setting DISPATCHER LATENCY_SECONDS 5
  run_one dispatcher scripts/bench-dispatcher.sh
}
bench_content() {
  settings=(); setting CONTENT ROUNDS 1; setting CONTENT EVENTS 2000
  run_one content scripts/bench-content.sh
}
bench_analytics() {
  settings=(); setting ANALYTICS ROUNDS 1; setting ANALYTICS DURATION 3; setting ANALYTICS CONNECTIONS ""; setting ANALYTICS OPEN_ROUNDS 1
  run_one analytics scripts/bench-analytics.sh
}
bench_e2e() {
  settings=()
  local args=() v
  v=$(pick E2E RATE "" no); if [ -n "$v" ]; then args+=(--rate "$v"); fi
  v=$(pick E2E SECONDS 10 no); if [ -n "$v" ]; then args+=(--seconds "$v"); fi
  v=$(pick E2E ACTIVITIES "" no); if [ -n "$v" ]; then args+=(--activities "$v"); fi
  demo_ports_free e2e scripts/bench-e2e.sh "${args[@]}" && run_one e2e scripts/bench-e2e.sh "${args[@]}"
}
# scripts/demo.sh (which bench-e2e.sh and bench-memory.sh run) listens on fixed ports; if something
# already answers on one of them (a demo, the other engineer's bench), its services would not start
# and the benchmark would talk to the other ones. Then the benchmark is not run and its row says why.
demo_ports_free() {  # name command…
  local name=$1 busy; shift
  busy=$(python3 scripts/bench_report.py busy-ports 2197 8081 8082 8083 8084 8090 8099)  # scripts/demo.sh's ports
  [ -z "$busy" ] && return 0
  echo "== $name: NOT RUN: ports $busy are in use (scripts/demo.sh needs 2197, 8081-8084, 8090, 8099: is a demo running?)"
  echo "bench-report: not run: ports $busy are in use; scripts/demo.sh needs 2197, 8081-8084, 8090 and 8099" >"$dir/$name.log"
  printf '%s\t%s\t%s\t%s\n' "$name" 1 0 "$*" >>"$dir/status.tsv"
  return 1
}
# --- memory per live activity at 100,000 activities: HOOK --------------------------------------------
# scripts/bench-memory.sh is written separately. When it exists it runs like the others (with
# --activities/--rate from MEMORY_ACTIVITIES/MEMORY_RATE; QUICK: 2,000 activities), and its lines
#   memory<TAB><service><TAB><bytes-per-activity><TAB><baseline-rss-bytes><TAB><rss-at-100k-bytes>
# fill the rows of apns-dispatcher and content-service. Without it those rows say
# "not measured: scripts/bench-memory.sh missing".
bench_memory() {
  settings=()
  local args=() v
  v=$(pick MEMORY ACTIVITIES 2000 no); if [ -n "$v" ]; then args+=(--activities "$v"); fi
  v=$(pick MEMORY RATE "" no); if [ -n "$v" ]; then args+=(--rate "$v"); fi
  if [ -f scripts/bench-memory.sh ]; then
    local command=(scripts/bench-memory.sh)
    [ -x scripts/bench-memory.sh ] || command=(bash scripts/bench-memory.sh)
    demo_ports_free memory "${command[@]}" "${args[@]}" && run_one memory "${command[@]}" "${args[@]}"
  else
    echo "== memory: not measured: scripts/bench-memory.sh missing"
    printf '%s\t%s\t%s\t%s\n' memory missing 0 scripts/bench-memory.sh >>"$dir/status.tsv"
  fi
}

machine() {  # key<TAB>value lines about this machine and checkout
  local kb
  printf 'cpu\t%s\n' "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  printf 'cpus\t%s\n' "$(nproc)"
  kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
  printf 'memory\t%s GiB\n' "$(awk -v kb="$kb" 'BEGIN {printf "%.1f", kb / 1048576}')"
  printf 'os\t%s\n' "$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}")"
  printf 'swift\t%s\n' "$(swift --version 2>&1 | grep -oE 'Swift version [0-9][0-9.]*' | head -1 | sed 's/Swift version //')"
  printf 'librdkafka\t%s\n' "$(pkg-config --modversion rdkafka 2>/dev/null)"  # as scripts/bootstrap.sh finds it
  printf 'tansu\t%s\n' "$("${ISLET_TOOLS:-$repo/.tools}/bin/tansu" --version 2>/dev/null | grep -oE '[0-9][0-9.]*' | head -1)"
  printf 'commit\t%s\n' "$(git rev-parse --short HEAD 2>/dev/null)"
  printf 'dirty\t%s\n' "$(git --no-optional-locks status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo yes || echo no)"
}

if [ "$report_only" != 1 ]; then
  rm -f "$dir"/*.log "$dir/status.tsv" "$dir/meta.tsv" "$dir/section.md"
  {
    printf 'started\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf 'command\t%s\n' "$(command_line)"
    printf 'quick\t%s\n' "$quick"
    printf 'benches\t%s\n' "${chosen[*]}"
    machine
    printf 'load_start\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
  } >"$dir/meta.tsv"
  echo "bench-report: $(command_line); logs in $(show "$dir")"

  # Build once, so that no benchmark's time includes the build (each script's own build is then a check).
  echo "== release build (log: $(show "$dir/build.log"))"
  started=$(date +%s)
  (scripts/bootstrap.sh && swift build -c release && swift build -c release --package-path Benchmarks) >"$dir/build.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\n' build "$rc" "$(($(date +%s) - started))" "swift build -c release; swift build -c release --package-path Benchmarks" >>"$dir/status.tsv"
  [ "$rc" -eq 0 ] || { echo "   FAILED (exit $rc); the benchmarks will try their own builds"; grep -v -e 'CMakeLists.txt' -e 'which are unhandled' "$dir/build.log" | tail -5 | sed 's/^/   | /'; }

  for name in "${all[@]}"; do
    case " ${chosen[*]} " in *" $name "*) "bench_$name" ;; esac
  done
  {
    printf 'finished\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf 'load_end\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
  } >>"$dir/meta.tsv"
fi

[ -f "$dir/meta.tsv" ] || { echo "bench-report: no saved run in $(show "$dir"): run scripts/bench-report.sh first" >&2; exit 1; }

# The report (scripts/bench_report.py): read the logs, write the section (also to section.md and stdout).
python3 scripts/bench_report.py section "$repo" "$dir" "$doc" "$report_only" "$(show "$dir")"
