#!/usr/bin/env bash
# content-service's figures: payload assembly per event in process (without and with an inline
# thumbnail, and the thumbnail itself), then events per second through one in-process instance
# against a fresh local broker (event read → push request acknowledged) next to a pass-through that
# reads the same events and writes them back with the same settings and the same in-order marking.
#
#   scripts/bench-content.sh             # 3 rounds of each, 20,000 events
#   ROUNDS=5 EVENTS=50000 scripts/bench-content.sh
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$repo/scripts/lib.sh"
cd "$repo"
export ISLET_RUN_DIR=${ISLET_RUN_DIR:-$repo/.islet-run}
mkdir -p "$ISLET_RUN_DIR"
rounds=${ROUNDS:-3}
events=${EVENTS:-20000}

scripts/bootstrap.sh
build_release islet-content-bench
bench=$(swift build -c release --show-bin-path)/islet-content-bench

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
  line=$("$bench" pipeline --bootstrap "$ISLET_KAFKA_BOOTSTRAP" --events "$events" | tr '\n' ' ')
  echo "round $r: $line"
  printf '%s\t%s\n' "$r" "$line" >> "$results"
done
stop_broker

# Medians, and machine-readable lines for scripts/bench-report.sh: result, name, islet, reference,
# ratio (- when there is no reference), then details.
python3 - "$ISLET_RUN_DIR/bench-content-assembly.txt" "$results" <<'PY'
import statistics, sys
fields = lambda text: dict(w.split("=", 1) for w in text.split() if "=" in w)
rows = [fields(l.split("\t", 1)[1]) for l in open(sys.argv[2]).read().splitlines() if "\t" in l]
if rows:
    content = statistics.median(float(r["content_events_per_s"]) for r in rows)
    passthrough = statistics.median(float(r["passthrough_events_per_s"]) for r in rows)
    print(f"pipeline, medians over {len(rows)} rounds: content-service {content:,.0f} events/s, pass-through {passthrough:,.0f} events/s, ratio {content / passthrough:.2f}")
    print(f"result\tcontent.pipeline\t{content:.0f}\t{passthrough:.0f}\t{content / passthrough:.4f}\trounds={len(rows)}")
for line in open(sys.argv[1]).read().splitlines():  # one figure per line, its name first
    f = fields(line)
    for key, name in (("assembly_us_per_event", "content.assembly"), ("assembly_with_thumbnail_us_per_event", "content.assembly_thumbnail")):
        if key in f:
            print(f"result\t{name}\t{float(f[key]):.1f}\t-\t-\tpayload_bytes={f.get('payload_bytes', '?')}")
PY
