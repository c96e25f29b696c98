#!/usr/bin/env python3
"""The Python of scripts/bench-analytics.sh.

  bench_analytics.py links SECRET ISSUED RUN COUNT
      prints COUNT signed widget links (the codec's signature, docs/links.md), one per line, for
      the activities RUN-0 … RUN-(COUNT-1), issued at ISSUED (Unix seconds), key id "bench".
  bench_analytics.py sweep LOAD_BIN URL PATH LINKS PID
      open loop (LOAD_BIN is islet-http-load): sends PATH taps at constant rates, each a new tap of
      one of the LINKS (a file), rising by half until a rate fails, then bisecting three times; a
      rate passes when every request was answered 2xx, p99 ≤ 50 ms and the rate was kept. Prints
      one line of JSON: the highest rate that passed, its latencies and the CPU time per request of
      the service (process PID) and of the generator; each step on stderr.
  bench_analytics.py summary RESULTS.tsv ACCEPTED ON_TOPIC OTHER [OPEN.tsv]
      prints the medians of the rounds (wrk's JSON lines: round<TAB>taps<TAB>no-op), the ratio
      taps / no-op, the service's accepted taps against the records on islet.clicks.v1, and a
      machine-readable `result` line for scripts/bench-report.sh; exits 1 when the two counts differ,
      or when more than 1 % of the accepted taps' number were answered otherwise (repeats, refusals).
"""
import base64, hashlib, hmac, json, os, statistics, subprocess, sys, time

P99_BUDGET_MS = 50.0


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


def process_cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def step(load_bin, url, path, links, pid, rate):
    """One open-loop run at `rate`: the generator's JSON, the service's CPU per request, and whether it passed."""
    body = '{"url":"{line}","tappedAt":"{now}","appVersion":"5.2.0","osVersion":"18.1"}'
    before = process_cpu(pid)
    out = subprocess.run([load_bin, "--url", url, "--path", path, "--rate", str(rate), "--duration", "4", "--warmup", "1",
                          "--connections", "64", "--lines", links, "--body", body, "--timeout", "5"],
                         capture_output=True, text=True)
    service_cpu = process_cpu(pid) - before
    if out.returncode != 0:
        sys.exit(f"islet-http-load failed at {rate}/s: {out.stderr.strip()}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    sent = max(r["sent"], 1)
    # The service's CPU over warm-up, window and drain, per request of all three (5 s of sending).
    r["serviceCpuUs"] = service_cpu * 1e6 / max(rate * 5, 1)
    r["loadCpuUs"] = r["cpuSeconds"] * 1e6 / sent
    # A send made late is measured from its intended time all the same (the lateness is in its
    # latency); the generator is the limit only when it used nearly a whole core of its own.
    r["generatorBound"] = r["cpuSeconds"] >= 0.9 * r["seconds"]
    r["passed"] = (r["completed"] == r["sent"] and r["non2xx"] == 0 and r["errors"] == 0 and r["timeouts"] == 0
                   and r["p99ms"] <= P99_BUDGET_MS and r["achievedPerSecond"] >= 0.97 * rate and not r["generatorBound"])
    print(f"  {path} at {rate:,}/s: {'pass' if r['passed'] else 'FAIL'}  achieved {r['achievedPerSecond']:,.0f}/s  p50 {r['p50ms']:.1f} ms"
          f"  p99 {r['p99ms']:.1f} ms  non-2xx {r['non2xx']}  errors {r['errors'] + r['timeouts']}  late sends {r['lateSends']}"
          f"  service {r['serviceCpuUs']:.0f} us CPU/request", file=sys.stderr)
    settle(pid)
    return r


def settle(pid):
    """Waits (up to 30 s) until the service uses less than a tenth of a core: a rate that failed leaves
    a backlog (requests, records for Kafka) whose work would otherwise fall into the next rate's."""
    for _ in range(30):
        before = process_cpu(pid)
        time.sleep(1)
        if process_cpu(pid) - before < 0.1:
            return


def sweep(load_bin, url, path, links, pid):
    """The highest rate with p99 within the budget: up by half until one fails, then three bisections."""
    settle(pid)
    best, rate, failed = None, 1000, None
    while rate <= 400_000:
        r = step(load_bin, url, path, links, pid, rate)
        if not r["passed"]:
            failed = r
            break
        best, rate = r, int(rate * 1.5)
    if best is not None and failed is not None:
        lo, hi = best["rate"], failed["rate"]
        for _ in range(3):
            mid = int((lo + hi) / 2)
            r = step(load_bin, url, path, links, pid, mid)
            if r["passed"]:
                best, lo = r, mid
            else:
                failed, hi = r, mid
    why = "none passed" if best is None else ("the generator's limit" if failed is not None and failed["generatorBound"] else "")
    print(json.dumps({"path": path, "maxRate": best["rate"] if best else 0, "p50ms": best["p50ms"] if best else None,
                      "p99ms": best["p99ms"] if best else None, "cpuUs": best["serviceCpuUs"] if best else None,
                      "loadCpuUs": best["loadCpuUs"] if best else None, "firstFailed": failed["rate"] if failed else None,
                      "limitedBy": why}))


def summary(results, accepted, on_topic, other, open_results=None):
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
    open_line = ""
    if open_results:
        rows = [line.split("\t") for line in open(open_results).read().splitlines() if line]
        ot = [json.loads(r[1]) for r in rows]; on = [json.loads(r[2]) for r in rows]
        mt, mn = med(ot, lambda x: x["maxRate"]), med(on, lambda x: x["maxRate"])
        fig = lambda xs, k: med([x for x in xs if x[k] is not None], lambda x: x[k]) if any(x[k] is not None for x in xs) else float("nan")
        print(f"open loop, the highest rate with p99 ≤ {P99_BUDGET_MS:g} ms (medians over {len(rows)} rounds; rates by round: "
              f"taps {', '.join(str(x['maxRate']) for x in ot)}; no-op {', '.join(str(x['maxRate']) for x in on)}):")
        for name, xs, m in (("taps (POST /v1/taps, acked)", ot, mt), ("no-op (POST /bench/noop)", on, mn)):
            limited = sorted({x["limitedBy"] for x in xs if x["limitedBy"]})
            print(f"{name:<30} {m:>10,.0f} req/s   p99 {fig(xs, 'p99ms'):6.2f} ms   service {fig(xs, 'cpuUs'):6.1f} µs CPU/request"
                  + (f"   ({'; '.join(limited)})" if limited else ""))
        ratio = mt / mn if mn else 0.0
        print(f"ratio taps / no-op, open loop: {ratio:.2f}")
        print(f"result\tanalytics.open\t{mt:.0f}\t{mn:.0f}\t{ratio:.4f}\trounds={len(rows)}\tp99_ms={fig(ot, 'p99ms'):.2f}"
              f"\tref_p99_ms={fig(on, 'p99ms'):.2f}\tcpu_us={fig(ot, 'cpuUs'):.1f}\tref_cpu_us={fig(on, 'cpuUs'):.1f}")
        open_line = (f" open_taps_per_s={mt:.0f} open_noop_per_s={mn:.0f} open_ratio={ratio:.3f} open_taps_cpu_us={fig(ot, 'cpuUs'):.1f}"
                     f" open_noop_cpu_us={fig(on, 'cpuUs'):.1f}")
    print(f"RESULT analytics taps_per_s={med(t, rate):.0f} noop_per_s={med(n, rate):.0f} ratio={med(t, rate) / med(n, rate):.3f}"
          f" taps_p99_ms={med(t, lambda x: x['p99ms']):.2f} noop_p99_ms={med(n, lambda x: x['p99ms']):.2f} accepted={accepted} on_topic={on_topic} non2xx_errors={bad}{open_line}")
    # Nearly every tap must be new: a load of repeats measures the repeat check, not the writes.
    if other > accepted / 100:
        print(f"the load's taps were not new: {other:,} answered as repeats or refused against {accepted:,} accepted")
    sys.exit(0 if accepted == on_topic and other <= accepted / 100 else 1)


if __name__ == "__main__":
    commands = {"links": (links, 4), "sweep": (sweep, 5), "summary": (summary, 4)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or len(sys.argv) - 2 not in (commands[sys.argv[1]][1], 5 if sys.argv[1] == "summary" else -1):
        sys.exit(__doc__)
    commands[sys.argv[1]][0](*sys.argv[2:])
