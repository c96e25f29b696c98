#!/usr/bin/env python3
"""The summary of scripts/bench-content.sh: the pipeline's medians and its ratio to the pass-through,
then machine-readable lines for scripts/bench-report.sh (result, name, islet, reference, ratio
(- when there is no reference), then details), and one `RESULT content key=value …` line.

  bench_content.py ASSEMBLY.txt RESULTS.tsv

ASSEMBLY.txt: islet-content-bench assembly's output (key=value words, one figure a line);
RESULTS.tsv: round<TAB>islet-content-bench pipeline's key=value words, one round a line.
"""
import statistics, sys


def main(assembly, results):
    fields = lambda text: dict(w.split("=", 1) for w in text.split() if "=" in w)
    rows = [fields(l.split("\t", 1)[1]) for l in open(results).read().splitlines() if "\t" in l]
    summary = []  # the RESULT line: key=value
    if rows:
        content = statistics.median(float(r["content_events_per_s"]) for r in rows)
        passthrough = statistics.median(float(r["passthrough_events_per_s"]) for r in rows)
        cpu = statistics.median(float(r.get("content_cpu_us_per_event", "nan")) for r in rows)
        passthrough_cpu = statistics.median(float(r.get("passthrough_cpu_us_per_event", "nan")) for r in rows)
        print(f"pipeline, medians over {len(rows)} rounds: content-service {content:,.0f} events/s ({cpu:.1f} µs of CPU each), "
              f"pass-through {passthrough:,.0f} events/s ({passthrough_cpu:.1f} µs), ratio {content / passthrough:.2f}")
        print(f"result\tcontent.pipeline\t{content:.0f}\t{passthrough:.0f}\t{content / passthrough:.4f}\trounds={len(rows)}\tcpu_us={cpu:.1f}\tref_cpu_us={passthrough_cpu:.1f}")
        summary += [f"events_per_s={content:.0f}", f"cpu_us_per_event={cpu:.1f}", f"passthrough_per_s={passthrough:.0f}",
                    f"passthrough_cpu_us_per_event={passthrough_cpu:.1f}", f"ratio={content / passthrough:.4f}", f"rounds={len(rows)}"]
    for line in open(assembly).read().splitlines():  # one figure per line, its name first
        f = fields(line)
        for key, name in (("assembly_us_per_event", "content.assembly"), ("assembly_with_thumbnail_us_per_event", "content.assembly_thumbnail")):
            if key in f:
                print(f"result\t{name}\t{float(f[key]):.1f}\t-\t-\tpayload_bytes={f.get('payload_bytes', '?')}")
                summary.append(f"{name.split('.', 1)[1]}_us={float(f[key]):.1f}")
        if line.startswith("api_event_us") and "once" in f and "twice" in f:
            # An event checked at the API and read back: assembled once, beside twice (before issue 59).
            once, twice = float(f["once"]), float(f["twice"])
            print(f"result\tcontent.api_event\t{once:.1f}\t{twice:.1f}\t{once / twice:.4f}\treference=assembled_twice")
            summary += [f"api_event_once_us={once:.1f}", f"api_event_twice_us={twice:.1f}"]
    print("RESULT content " + " ".join(summary))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
