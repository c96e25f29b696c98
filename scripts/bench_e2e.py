#!/usr/bin/env python3
"""The Python of scripts/bench-e2e.sh: its machine-readable lines for scripts/bench-report.sh.

  bench_e2e.py hop LATENCY.txt SENT BROKER
      one Kafka hop's latencies (rdkafka_performance -l -A: µs, one a line) as a line for people
      and latency<TAB>kafka.hop.BROKER<TAB>p50<TAB>p90<TAB>p99<TAB>max<TAB>received<TAB>sent (ms);
      fails when the consumer recorded nothing.
  bench_e2e.py result OUTPUT.txt BROKER
      from the output of `scripts/demo.sh --latency`, its last result as
      latency<TAB>e2e.BROKER<TAB>p50<TAB>p90<TAB>p99<TAB>max<TAB>received<TAB>sent<TAB>rate=…, and its
      breakdown as detail<TAB>BROKER<TAB>text lines; fails when there is no result.
"""
import re, sys


def hop(path, sent, broker):
    sent = int(sent)
    try:
        values = sorted(int(line) / 1000 for line in open(path) if line.strip().isdigit())
    except FileNotFoundError:
        values = []
    if not values:
        sys.exit(f"one Kafka hop on {broker}: the consumer recorded nothing (see the logs next to {path})")
    p = lambda q: values[min(len(values) - 1, int(len(values) * q))]
    print(f"one Kafka hop on {broker} (rdkafka_performance), {len(values)} of {sent} messages: p50 {p(0.5):.1f} ms, p90 {p(0.9):.1f} ms, p99 {p(0.99):.1f} ms, max {values[-1]:.1f} ms")
    print(f"latency\tkafka.hop.{broker}\t{p(0.5):.2f}\t{p(0.9):.2f}\t{p(0.99):.2f}\t{values[-1]:.2f}\t{len(values)}\t{sent}")


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


if __name__ == "__main__":
    commands = {"hop": (hop, 3), "result": (result, 2)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or len(sys.argv) != 2 + commands[sys.argv[1]][1]:
        sys.exit(__doc__)
    commands[sys.argv[1]][0](*sys.argv[2:])
