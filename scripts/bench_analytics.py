#!/usr/bin/env python3
"""The Python of scripts/bench-analytics.sh.

  bench_analytics.py links SECRET ISSUED RUN COUNT
      prints COUNT signed widget links (the codec's signature, docs/links.md), one per line, for
      the activities RUN-0 … RUN-(COUNT-1), issued at ISSUED (Unix seconds), key id "bench".
  bench_analytics.py summary RESULTS.tsv ACCEPTED ON_TOPIC OTHER
      prints the medians of the rounds (wrk's JSON lines: round<TAB>taps<TAB>no-op), the ratio
      taps / no-op, the service's accepted taps against the records on islet.clicks.v1, and a
      machine-readable `result` line for scripts/bench-report.sh; exits 1 when the two counts differ,
      or when more than 1 % of the accepted taps' number were answered otherwise (repeats, refusals).
"""
import base64, hashlib, hmac, json, statistics, sys


def links(secret, issued, run, count):
    secret = secret.encode()
    urls = []
    for i in range(int(count)):
        base = f"fooddelivery://order/{run}-{i}?tab=status"
        values = [f"{run}-{i}", "DeliveryAttributes", "lockScreen", "eta", "7", issued, "bench"]
        mac = hmac.new(secret, "\n".join(["islet-link-v1", base] + values).encode(), hashlib.sha256).digest()[:16]
        sig = base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
        names = ["isl_a", "isl_t", "isl_s", "isl_e", "isl_q", "isl_i", "isl_k", "isl_sig"]
        urls.append(base + "&" + "&".join(f"{n}={v}" for n, v in zip(names, values + [sig])))
    print("\n".join(urls))


def summary(results, accepted, on_topic, other):
    rows = [line.split("\t") for line in open(results).read().splitlines() if line]
    t = [json.loads(r[1]) for r in rows]; n = [json.loads(r[2]) for r in rows]
    rate = lambda x: x["requests"] / x["seconds"]
    med = lambda xs, f: statistics.median(f(x) for x in xs)
    for name, xs in (("taps (POST /v1/taps, acked)", t), ("no-op (POST /bench/noop)", n)):
        bad = sum(x["non2xx"] + x["errors"] for x in xs)
        print(f"{name:<30} {med(xs, rate):>10,.0f} req/s   p50 {med(xs, lambda x: x['p50ms']):6.2f} ms   p99 {med(xs, lambda x: x['p99ms']):6.2f} ms   non-2xx/errors {bad}")
    print(f"ratio taps / no-op: {med(t, rate) / med(n, rate):.2f}   (medians over {len(rows)} rounds)")
    accepted, on_topic, other = int(float(accepted)), int(on_topic), int(float(other))
    print(f"accepted by the service: {accepted:,}   records on islet.clicks.v1: {on_topic:,}   other verdicts: {other}   "
          + ("equal" if accepted == on_topic else "MISMATCH"))
    # A machine-readable line for scripts/bench-report.sh: result, name, islet, reference, ratio, then details.
    bad = sum(x["non2xx"] + x["errors"] for x in t + n)
    print(f"result\tanalytics.taps\t{med(t, rate):.0f}\t{med(n, rate):.0f}\t{med(t, rate) / med(n, rate):.4f}\trounds={len(rows)}"
          f"\tp50_ms={med(t, lambda x: x['p50ms']):.2f}\tp99_ms={med(t, lambda x: x['p99ms']):.2f}\tref_p99_ms={med(n, lambda x: x['p99ms']):.2f}\tnon2xx_errors={bad}"
          f"\taccepted={accepted}\ton_topic={on_topic}")
    print(f"RESULT analytics taps_per_s={med(t, rate):.0f} noop_per_s={med(n, rate):.0f} ratio={med(t, rate) / med(n, rate):.3f}"
          f" taps_p99_ms={med(t, lambda x: x['p99ms']):.2f} noop_p99_ms={med(n, lambda x: x['p99ms']):.2f} accepted={accepted} on_topic={on_topic} non2xx_errors={bad}")
    # Nearly every tap must be new: a load of repeats measures the repeat check, not the writes.
    if other > accepted / 100:
        print(f"the load's taps were not new: {other:,} answered as repeats or refused against {accepted:,} accepted")
    sys.exit(0 if accepted == on_topic and other <= accepted / 100 else 1)


if __name__ == "__main__":
    commands = {"links": (links, 4), "summary": (summary, 4)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or len(sys.argv) != 2 + commands[sys.argv[1]][1]:
        sys.exit(__doc__)
    commands[sys.argv[1]][0](*sys.argv[2:])
