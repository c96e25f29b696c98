#!/usr/bin/env python3
"""The Python of scripts/bench-dispatcher.sh.

  bench_dispatcher.py payload FILE
      writes a Live Activity update of exactly 1,024 bytes (compact JSON) to FILE: h2load's body.
  bench_dispatcher.py rate COUNT RUN_DIR < stats.json
      from the simulator's /admin/stats, prints the dispatcher's pushes per second (accepted over
      the time from the first to the last); fails when fewer than COUNT pushes arrived.
  bench_dispatcher.py summary THROUGHPUT.tsv PACED.txt RECEIVED.json
      prints the medians of the throughput rounds (round<TAB>dispatcher<TAB>h2load<TAB>aioapns) and
      their ratios, the latency at 1,000 requests/s (PACED.txt: apnsID and production time in µs,
      from islet-dispatch-bench paced; RECEIVED.json: the simulator's notifications), then the
      machine-readable `result` and `latency` lines for scripts/bench-report.sh.
"""
import json, statistics, sys
from datetime import datetime


def payload(path):
    body = {"aps": {"event": "update", "timestamp": 1795000001, "content-state": {"sequence": 1, "pad": ""}}}
    text = json.dumps(body, separators=(",", ":"))
    body["aps"]["content-state"]["pad"] = "x" * (1024 - len(text))
    open(path, "w").write(json.dumps(body, separators=(",", ":")))


def rate(count, run):
    count = int(count)
    s = json.load(sys.stdin)
    t = lambda x: datetime.fromisoformat(x.replace("Z", "+00:00")).timestamp()
    accepted = s["accepted"]
    span = t(s["lastAcceptedAt"]) - t(s["firstAcceptedAt"]) if accepted else 0
    if accepted < count or span <= 0:
        sys.exit(f"dispatcher round failed: {accepted} of {count} pushes reached the simulator (log: {run}/dispatcher.log)")
    print(int(accepted / span))


def summary(throughput, paced, received_json):
    rows = [l.split("\t") for l in open(throughput).read().splitlines() if l]
    if rows:  # ROUNDS=0 measures the latency only
        # round, dispatcher/s, dispatcher CPU µs per push, h2load/s, aioapns/s
        d = statistics.median(int(r[1]) for r in rows); cpu = statistics.median(float(r[2]) for r in rows)
        h = statistics.median(float(r[3]) for r in rows); a = statistics.median(int(r[4]) for r in rows)
        print(f"{'dispatcher (Kafka → simulator 200)':<36}{d:>10,.0f} pushes/s    CPU {cpu:.0f} µs per push")
        print(f"{'h2load (straight to the simulator)':<36}{h:>10,.0f} req/s    dispatcher / h2load  = {d / h:.2f}  (target ≥ 0.4)")
        print(f"{'aioapns (straight to the simulator)':<36}{a:>10,.0f} req/s    dispatcher / aioapns = {d / a if a else float('nan'):.1f}  (target ≥ 10)")
    created = dict(line.split() for line in open(paced).read().splitlines() if line)
    received = json.load(open(received_json))
    t = lambda x: datetime.fromisoformat(x.replace("Z", "+00:00")).timestamp()
    lat = sorted((t(n["receivedAt"]) - int(created[n["apnsID"]]) / 1e6) * 1000 for n in received if n["apnsID"] in created)
    if lat:
        q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
        print(f"latency at 1,000/s: {len(lat)} of {len(created)} pushes, p50 {q(0.5):.1f} ms, p99 {q(0.99):.1f} ms, max {lat[-1]:.1f} ms")
    # Machine-readable lines for scripts/bench-report.sh: result, name, islet, reference, ratio, rounds;
    # latency, name, p50, p90, p99, max (ms), received, sent.
    if rows:
        print(f"result\tdispatcher.h2load\t{d:.0f}\t{h:.0f}\t{d / h if h else float('nan'):.4f}\trounds={len(rows)}")
        print(f"result\tdispatcher.aioapns\t{d:.0f}\t{a:.0f}\t{d / a if a else float('nan'):.4f}\trounds={len(rows)}")
    if lat:
        print(f"latency\tdispatcher\t{q(0.5):.1f}\t{q(0.9):.1f}\t{q(0.99):.1f}\t{lat[-1]:.1f}\t{len(lat)}\t{len(created)}")
    else:
        print(f"latency\tdispatcher\tnan\tnan\tnan\tnan\t0\t{len(created)}")


if __name__ == "__main__":
    commands = {"payload": (payload, 1), "rate": (rate, 2), "summary": (summary, 3)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or len(sys.argv) != 2 + commands[sys.argv[1]][1]:
        sys.exit(__doc__)
    commands[sys.argv[1]][0](*sys.argv[2:])
