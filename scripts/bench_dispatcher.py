#!/usr/bin/env python3
"""The Python of scripts/bench-dispatcher.sh.

  bench_dispatcher.py payload FILE
      writes a Live Activity update of exactly 1,024 bytes (compact JSON) to FILE: h2load's body.
  bench_dispatcher.py nginx-rate COUNT ACCESS_LOG
      from the reference nginx's access log (`$msec $status` per request), prints "rate non200":
      requests per second from the first to the last; fails when fewer than COUNT were logged.
  bench_dispatcher.py rate COUNT RUN_DIR [WHO] < stats.json
      from the simulator's /admin/stats, prints the requests per second it accepted (over the time
      from the first to the last); fails when fewer than COUNT arrived.
  bench_dispatcher.py summary THROUGHPUT.tsv PACED.txt RECEIVED.json
      prints the medians of the throughput rounds and their ratios (each round: dispatcher, h2load,
      aioapns and h2load against the simulator, each "rate µs-of-CPU-per-request…"), the latency at
      1,000 requests/s (PACED.txt: apnsID and production time in µs, from islet-dispatch-bench
      paced; RECEIVED.json: the simulator's notifications), then the machine-readable `result` and
      `latency` lines for scripts/bench-report.sh and one `RESULT dispatcher key=value …` line.
  bench_dispatcher.py compare COMPARE.tsv
      the A/B run's medians (each round: round, A's rate and µs of CPU per push, B's) and the ratios
      A / B, and one `RESULT dispatcher-compare key=value …` line.
"""
import json, statistics, sys
from datetime import datetime


def payload(path):
    body = {"aps": {"event": "update", "timestamp": 1795000001, "content-state": {"sequence": 1, "pad": ""}}}
    text = json.dumps(body, separators=(",", ":"))
    body["aps"]["content-state"]["pad"] = "x" * (1024 - len(text))
    open(path, "w").write(json.dumps(body, separators=(",", ":")))


def nginx_rate(count, log):
    count = int(count)
    lines = [l.split() for l in open(log).read().splitlines() if l.strip()]
    if len(lines) < count:
        sys.exit(f"only {len(lines)} of {count} requests reached nginx ({log})")
    times = [float(l[0]) for l in lines]
    non200 = sum(1 for l in lines if l[1] != "200")
    span = max(times) - min(times)
    print(f"{int(len(lines) / span) if span > 0 else 0} {non200}")


def rate(count, run, who="dispatcher"):
    count = int(count)
    s = json.load(sys.stdin)
    t = lambda x: datetime.fromisoformat(x.replace("Z", "+00:00")).timestamp()
    accepted = s["accepted"]
    span = t(s["lastAcceptedAt"]) - t(s["firstAcceptedAt"]) if accepted else 0
    if accepted < count or span <= 0:
        sys.exit(f"{who} round failed: {accepted} of {count} requests reached the simulator (logs: {run})")
    print(int(accepted / span))


def summary(throughput, paced, received_json):
    rows = [[field.split() for field in l.split("\t")[1:]] for l in open(throughput).read().splitlines() if l]
    if rows:  # ROUNDS=0 measures the latency only
        med = lambda i, j: statistics.median(float(r[i][j]) for r in rows)
        d, d_cpu, d_nginx, d_broker = (med(0, j) for j in range(4))
        h, h_cpu, h_nginx = (med(1, j) for j in range(3))
        a, a_cpu, a_nginx = (med(2, j) for j in range(3))
        s, s_cpu, s_sim = (med(3, j) for j in range(3))
        print(f"{'':<40}{'rate':>14}   µs of CPU per request (medians of {len(rows)} rounds)")
        print(f"{'dispatcher (Kafka → nginx 200)':<40}{d:>10,.0f} /s   dispatcher {d_cpu:.0f}, nginx {d_nginx:.1f}, broker {d_broker:.1f}  (target: dispatcher ≤ 60)")
        print(f"{'h2load → nginx (-c 2 -m 100)':<40}{h:>10,.0f} /s   h2load {h_cpu:.1f}, nginx {h_nginx:.1f}    dispatcher / h2load = {d / h:.2f}")
        print(f"{'aioapns → nginx (2 connections)':<40}{a:>10,.0f} /s   aioapns {a_cpu:.0f}, nginx {a_nginx:.1f}    dispatcher / aioapns = {d / a if a else float('nan'):.2f}  (target ≥ 4)")
        print(f"{'h2load → APNs simulator':<40}{s:>10,.0f} /s   h2load {s_cpu:.1f}, simulator {s_sim:.1f}    simulator / nginx = {s / h:.2f}  (target ≥ 30,000/s)")
    created = dict(line.split() for line in open(paced).read().splitlines() if line)
    received = json.load(open(received_json))
    t = lambda x: datetime.fromisoformat(x.replace("Z", "+00:00")).timestamp()
    lat = sorted((t(n["receivedAt"]) - int(created[n["apnsID"]]) / 1e6) * 1000 for n in received if n["apnsID"] in created)
    if lat:
        q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
        print(f"latency at 1,000/s: {len(lat)} of {len(created)} pushes, p50 {q(0.5):.1f} ms, p99 {q(0.99):.1f} ms, max {lat[-1]:.1f} ms")
    # Machine-readable lines for scripts/bench-report.sh: result, name, islet, reference, ratio, rounds, extras;
    # latency, name, p50, p90, p99, max (ms), received, sent.
    if rows:
        n = f"rounds={len(rows)}"
        print(f"result\tdispatcher.nginx.h2load\t{d:.0f}\t{h:.0f}\t{d / h:.4f}\t{n}\tcpu_us={d_cpu:.1f}\tref_cpu_us={h_cpu:.1f}")
        print(f"result\tdispatcher.nginx.aioapns\t{d:.0f}\t{a:.0f}\t{d / a if a else float('nan'):.4f}\t{n}\tcpu_us={d_cpu:.1f}\tref_cpu_us={a_cpu:.1f}")
        print(f"result\tsimulator.h2load\t{s:.0f}\t{h:.0f}\t{s / h:.4f}\t{n}\tcpu_us={s_sim:.1f}\tref_cpu_us={h_nginx:.1f}")
    if lat:
        print(f"latency\tdispatcher\t{q(0.5):.1f}\t{q(0.9):.1f}\t{q(0.99):.1f}\t{lat[-1]:.1f}\t{len(lat)}\t{len(created)}")
    else:
        print(f"latency\tdispatcher\tnan\tnan\tnan\tnan\t0\t{len(created)}")
    fields = []
    if rows:
        fields += [f"cpu_us_per_push={d_cpu:.1f}", f"pushes_per_s={d:.0f}", f"nginx_cpu_us_per_push={d_nginx:.1f}", f"broker_cpu_us_per_push={d_broker:.1f}",
                   f"h2load_per_s={h:.0f}", f"h2load_cpu_us={h_cpu:.1f}", f"aioapns_per_s={a:.0f}", f"aioapns_cpu_us={a_cpu:.0f}",
                   f"simulator_per_s={s:.0f}", f"simulator_cpu_us={s_sim:.1f}", f"rounds={len(rows)}"]
    if lat:
        fields += [f"latency_p50_ms={q(0.5):.1f}", f"latency_p99_ms={q(0.99):.1f}"]
    print("RESULT dispatcher " + " ".join(fields))


def compare(path):
    rows = [line.split("\t") for line in open(path).read().splitlines() if line]
    if not rows:
        sys.exit("no A/B round finished")
    med = lambda i: statistics.median(float(r[i]) for r in rows)
    a_rate, a_cpu, b_rate, b_cpu = med(1), med(2), med(3), med(4)
    print(f"medians of {len(rows)} rounds: A {a_rate:,.0f} pushes/s, {a_cpu:.1f} µs CPU/push; B {b_rate:,.0f} pushes/s, {b_cpu:.1f} µs CPU/push")
    print(f"A / B: {a_rate / b_rate:.3f} × the rate, {a_cpu / b_cpu:.3f} × the CPU per push")
    print(f"RESULT dispatcher-compare a_per_s={a_rate:.0f} a_cpu_us={a_cpu:.1f} b_per_s={b_rate:.0f} b_cpu_us={b_cpu:.1f} rounds={len(rows)}")


if __name__ == "__main__":
    commands = {"payload": (payload, (1,)), "compare": (compare, (1,)), "nginx-rate": (nginx_rate, (2,)), "rate": (rate, (2, 3)), "summary": (summary, (3,))}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or len(sys.argv) - 2 not in commands[sys.argv[1]][1]:
        sys.exit(__doc__)
    commands[sys.argv[1]][0](*sys.argv[2:])
