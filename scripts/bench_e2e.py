#!/usr/bin/env python3
"""The Python of scripts/bench-e2e.sh: its machine-readable lines for scripts/bench-report.sh.

  bench_e2e.py hop LATENCY.txt SENT BROKER [LINGER-MS]
      one Kafka hop's latencies (rdkafka_performance -l -A: µs, one a line) as a line for people
      and latency<TAB>KEY<TAB>p50<TAB>p90<TAB>p99<TAB>max<TAB>received<TAB>sent (ms), KEY being
      kafka.hop.BROKER for the event's hop (linger 5 ms, the default) and kafka.hop.BROKER.linger1
      for the push request's (linger 1 ms); fails when the consumer recorded nothing.
  bench_e2e.py result OUTPUT.txt BROKER
      from the output of `scripts/demo.sh --latency`, its last result as
      latency<TAB>e2e.BROKER<TAB>p50<TAB>p90<TAB>p99<TAB>max<TAB>received<TAB>sent<TAB>rate=…, and its
      breakdown as detail<TAB>BROKER<TAB>text lines; fails when there is no result.
  bench_e2e.py summary LINES.tsv
      from the lines above, one line `RESULT e2e BROKER_p50_ms=… BROKER_p99_ms=… BROKER_ref_p50_ms=…
      BROKER_ref_p99_ms=… BROKER_received=… BROKER_sent=…` (the reference: the two hops summed).
"""
import re, sys


def hop_key(broker, linger):
    return f"kafka.hop.{broker}" if int(linger) == 5 else f"kafka.hop.{broker}.linger{int(linger)}"


def hop(path, sent, broker, linger="5"):
    sent = int(sent)
    try:
        values = sorted(int(line) / 1000 for line in open(path) if line.strip().isdigit())
    except FileNotFoundError:
        values = []
    if not values:
        sys.exit(f"one Kafka hop on {broker}: the consumer recorded nothing (see the logs next to {path})")
    p = lambda q: values[min(len(values) - 1, int(len(values) * q))]
    print(f"one Kafka hop on {broker}, linger {linger} ms (rdkafka_performance), {len(values)} of {sent} messages: p50 {p(0.5):.1f} ms, p90 {p(0.9):.1f} ms, p99 {p(0.99):.1f} ms, max {values[-1]:.1f} ms")
    print(f"latency\t{hop_key(broker, linger)}\t{p(0.5):.2f}\t{p(0.9):.2f}\t{p(0.99):.2f}\t{values[-1]:.2f}\t{len(values)}\t{sent}")


def result(path, broker):
    text = open(path, encoding="utf-8", errors="replace").read()
    m = None
    for m in re.finditer(r"end-to-end latency \(.*?\), (\d+) events at (\d+)/s: p50 (\S+) ms, p90 (\S+) ms, p99 (\S+) ms, max (\S+) ms; (\d+) not received", text):
        pass
    if m is None:
        sys.exit(f"end to end on {broker}: no result in {path}")
    received, rate, p50, p90, p99, mx, missing = m.groups()
    print(f"latency\te2e.{broker}\t{p50}\t{p90}\t{p99}\t{mx}\t{received}\t{int(received) + int(missing)}\trate={rate}")
    for line in text.splitlines():
        if line.startswith(("  p50 by", "  event produced", "  request made", "  CPU ")):
            print(f"detail\t{broker}\t{line.strip()}")


def summary(path):
    found = {}
    for line in open(path, encoding="utf-8"):
        f = line.rstrip("\n").split("\t")
        if f[0] == "latency" and len(f) >= 8:
            found[f[1]] = f[2:]
    figures = []
    for broker in ("tansu", "mock"):
        e2e = found.get(f"e2e.{broker}")
        if e2e is None:
            continue
        figures += [f"{broker}_p50_ms={e2e[0]}", f"{broker}_p99_ms={e2e[2]}"]
        event_hop, request_hop = found.get(f"kafka.hop.{broker}"), found.get(f"kafka.hop.{broker}.linger1")
        if event_hop and request_hop:
            figures += [f"{broker}_ref_p50_ms={float(event_hop[0]) + float(request_hop[0]):.2f}",
                        f"{broker}_ref_p99_ms={float(event_hop[2]) + float(request_hop[2]):.2f}"]
        figures += [f"{broker}_received={e2e[4]}", f"{broker}_sent={e2e[5]}"]
    print("RESULT e2e " + (" ".join(figures) if figures else "measured=none"))


if __name__ == "__main__":
    commands = {"hop": (hop, 3, 4), "result": (result, 2, 2), "summary": (summary, 1, 1)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or not commands[sys.argv[1]][1] <= len(sys.argv) - 2 <= commands[sys.argv[1]][2]:
        sys.exit(__doc__)
    commands[sys.argv[1]][0](*sys.argv[2:])
