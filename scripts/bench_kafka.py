#!/usr/bin/env python3
"""The summary of scripts/bench-kafka.sh: medians of its rounds and the ratio wrapper / librdkafka,
with each side's CPU time per message, then one machine-readable `result` line per figure for
scripts/bench-report.sh and one `RESULT kafka key=value …` line with them all.

  bench_kafka.py RESULTS.tsv

RESULTS.tsv: one line a measurement, what<TAB>size<TAB>round<TAB>islet msg/s<TAB>librdkafka msg/s
[<TAB>islet CPU µs/msg<TAB>librdkafka CPU µs/msg] (what: produce, send, send10k or consume; an
older log has no CPU columns).
"""
import statistics, sys

WHAT = ("produce", "send", "send10k", "consume")


def main(results):
    rows = [line.split("\t") for line in open(results).read().split("\n") if line]
    medians = []  # (what, size, islet, librdkafka, rounds, islet cpu, librdkafka cpu)
    for what in WHAT:
        for size in ("300", "2048"):
            sel = [r for r in rows if r[0] == what and r[1] == size]
            if sel:
                cpu = lambda i: statistics.median(float(r[i]) for r in sel) if all(len(r) > i and r[i] for r in sel) else None
                medians.append((what, size, statistics.median(int(r[3]) for r in sel), statistics.median(int(r[4]) for r in sel), len(sel), cpu(5), cpu(6)))
    us = lambda v: f"{v:.2f}" if v is not None else "—"
    print(f"{'what':<10}{'size':>6}{'islet msg/s':>14}{'librdkafka msg/s':>18}{'ratio':>8}{'islet µs CPU':>14}{'librdkafka µs CPU':>19}   (medians; ratio of medians)")
    for what, size, islet, rdk, _, ic, kc in medians:
        print(f"{what:<10}{size:>6}{islet:>14,.0f}{rdk:>18,.0f}{islet / rdk:>8.2f}{us(ic):>14}{us(kc):>19}")
    print("produce: one loop, a delivery callback per record; send: awaited from 1,000 concurrent tasks (send10k: 10,000);")
    print("each is compared with rdkafka_performance -P -D; CPU is the process's user + system time per message.")
    # Machine-readable lines for scripts/bench-report.sh: result, name, islet, reference, ratio, rounds, then details.
    for what, size, islet, rdk, rounds, ic, kc in medians:
        cpu = (f"\tcpu_us={ic:.2f}" if ic is not None else "") + (f"\tref_cpu_us={kc:.2f}" if kc is not None else "")
        print(f"result\tkafka.{what}.{size}\t{islet:.0f}\t{rdk:.0f}\t{islet / rdk:.4f}\trounds={rounds}{cpu}")
    print("RESULT kafka " + (" ".join(
        f"{what}_{size}_per_s={islet:.0f} {what}_{size}_ref_per_s={rdk:.0f} {what}_{size}_ratio={islet / rdk:.3f}"
        + (f" {what}_{size}_cpu_us={ic:.2f} {what}_{size}_ref_cpu_us={kc:.2f}" if ic is not None and kc is not None else "")
        for what, size, islet, rdk, _, ic, kc in medians) or "measured=none"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
