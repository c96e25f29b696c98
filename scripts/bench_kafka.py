#!/usr/bin/env python3
"""The summary of scripts/bench-kafka.sh: medians of its rounds and the ratio wrapper / librdkafka,
then one machine-readable `result` line per figure for scripts/bench-report.sh and one
`RESULT kafka key=value …` line with them all.

  bench_kafka.py RESULTS.tsv

RESULTS.tsv: one line a measurement, what<TAB>size<TAB>round<TAB>islet msg/s<TAB>librdkafka msg/s
(what: produce, send or consume).
"""
import statistics, sys


def main(results):
    rows = [line.split("\t") for line in open(results).read().split("\n") if line]
    medians = []  # (what, size, islet, librdkafka, rounds)
    for what in ("produce", "send", "consume"):
        for size in ("300", "2048"):
            sel = [r for r in rows if r[0] == what and r[1] == size]
            if sel:
                medians.append((what, size, statistics.median(int(r[3]) for r in sel), statistics.median(int(r[4]) for r in sel), len(sel)))
    print(f"{'what':<10}{'size':>6}{'islet msg/s':>14}{'librdkafka msg/s':>18}{'ratio':>8}   (medians; ratio of medians)")
    for what, size, islet, rdk, _ in medians:
        print(f"{what:<10}{size:>6}{islet:>14,.0f}{rdk:>18,.0f}{islet / rdk:>8.2f}")
    print("produce: one loop, a delivery callback per record; send: the async API from 1,000 concurrent tasks;")
    print("both are compared with rdkafka_performance -P -D.")
    # Machine-readable lines for scripts/bench-report.sh: result, name, islet, reference, ratio, rounds.
    for what, size, islet, rdk, rounds in medians:
        print(f"result\tkafka.{what}.{size}\t{islet:.0f}\t{rdk:.0f}\t{islet / rdk:.4f}\trounds={rounds}")
    print("RESULT kafka " + (" ".join(f"{what}_{size}_per_s={islet:.0f} {what}_{size}_ref_per_s={rdk:.0f} {what}_{size}_ratio={islet / rdk:.3f}"
                                      for what, size, islet, rdk, _ in medians) or "measured=none"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
