#!/usr/bin/env python3
"""The report of scripts/bench-report.sh, which runs the benchmarks, keeps their logs and calls this:

  bench_report.py section REPO OUT DOC REPORT_ONLY OUT_SHOWN
      reads OUT/meta.tsv, OUT/status.tsv and the machine-readable lines of OUT/<benchmark>.log,
      writes the report section to OUT/section.md and to stdout, and rewrites it between the two
      markers of DOC (a path relative to REPO unless absolute). REPORT_ONLY is 1 when the section
      is rewritten from saved logs (REPORT_ONLY=1 scripts/bench-report.sh); OUT_SHOWN is OUT as the
      report names it ($ISLET_RUN_DIR/...). Exits 1 when a benchmark failed or a log held no
      figures to read.

  bench_report.py busy-ports PORT...
      prints, separated by spaces, those of the loopback TCP ports something accepts connections
      on (an empty line when none).
"""
import datetime, math, os, re, socket, sys


def busy_ports(ports):
    busy = []
    for port in ports:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0: busy.append(str(port))
    print(" ".join(busy))


def write_section(repo, out, doc, report_only, out_shown):
    BEGIN, END = "<!-- bench-report:begin -->", "<!-- bench-report:end -->"

    def table(path):
        try:
            return [line.rstrip("\n").split("\t") for line in open(path, encoding="utf-8") if line.strip()]
        except FileNotFoundError:
            return []
    meta = {r[0]: (r[1] if len(r) > 1 else "") for r in table(os.path.join(out, "meta.tsv"))}
    status = {r[0]: {"rc": r[1], "seconds": int(r[2]) if r[2].isdigit() else 0, "cmd": r[3]} for r in table(os.path.join(out, "status.tsv")) if len(r) >= 4}
    chosen = meta.get("benches", "").split()

    SCRIPTS = {"kafka": "scripts/bench-kafka.sh", "registry": "scripts/bench-registry.sh", "dispatcher": "scripts/bench-dispatcher.sh",
               "content": "scripts/bench-content.sh", "analytics": "scripts/bench-analytics.sh", "e2e": "scripts/bench-e2e.sh",
               "memory": "scripts/bench-memory.sh"}

    def parse(name):
        """The machine-readable lines of a benchmark's log: {(kind, key): [fields…]}."""
        try:
            text = open(os.path.join(out, name + ".log"), encoding="utf-8", errors="replace").read()
        except FileNotFoundError:
            return None
        found = {}
        for line in text.splitlines():
            f = line.split("\t")
            if f[0] in ("result", "latency", "memory") and len(f) >= 3:
                found[(f[0], f[1])] = f[2:]
            if f[0] == "detail" and len(f) >= 3:  # bench-e2e's breakdown, per broker
                found.setdefault(("detail", f[1]), []).append(f[2])
            m = re.match(r"(\S+): .* with (\d+) live activities", line)  # bench-memory's line for people: how many
            if m:
                found[("activities", m.group(1))] = [m.group(2)]
        return found

    def num(x):
        try:
            v = float(x)
        except (TypeError, ValueError):
            return None
        return None if math.isnan(v) else v
    def extras(fields):
        return dict(f.split("=", 1) for f in fields if "=" in f)
    def n0(v): return f"{v:,.0f}"
    def ms(v): return "—" if v is None else f"{v:,.1f} ms"
    def mb(v): return f"{v / 1e6:,.1f} MB"
    def duration(s):
        s = int(s)
        if s < 60: return f"{s} s"
        if s < 3600: return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
        return f"{s // 3600} h {s % 3600 // 60} min"
    def fmt_ratio(r, target):
        text = f"{r:.2f}"
        if target is not None and r < target and round(r, 2) >= target:
            text = f"{r:.3f}"
        return text

    # Each row: benchmark, what, kind, key, reference text, target or None, units (Islet, reference).
    # The target of a "ratio" row is the least ratio; of a "rate" row (shown as a ratio row) the least
    # figure of Islet's side; of a "cpu" row and a "figure" row the most.
    ROWS = [
        ("kafka", "Kafka wrapper: `produce(onDelivery:)` (content-service's push requests, the dispatcher's outcomes), 300 B", "ratio", "kafka.produce.300", "`rdkafka_performance -P -D`", 0.8, ("msg/s", "msg/s")),
        ("kafka", "Kafka wrapper: `produce(onDelivery:)`, 2 KB", "ratio", "kafka.produce.2048", "`rdkafka_performance -P -D`", 0.8, ("msg/s", "msg/s")),
        ("kafka", "Kafka wrapper: consume, 300 B", "ratio", "kafka.consume.300", "`rdkafka_performance -C -G`", 0.8, ("msg/s", "msg/s")),
        ("kafka", "Kafka wrapper: consume, 2 KB", "ratio", "kafka.consume.2048", "`rdkafka_performance -C -G`", 0.8, ("msg/s", "msg/s")),
        ("kafka", "Kafka wrapper: awaited `send` from 1,000 tasks (token-registry, analytics-ingest), 300 B", "ratio", "kafka.send.300", "`rdkafka_performance -P -D`", 0.6, ("msg/s", "msg/s")),
        ("kafka", "Kafka wrapper: awaited `send` from 1,000 tasks, 2 KB", "ratio", "kafka.send.2048", "`rdkafka_performance -P -D`", 0.6, ("msg/s", "msg/s")),
        ("kafka", "Kafka wrapper: awaited `send` from 10,000 tasks (what the path carries when 1,000 in flight are not the limit), 300 B", "ratio", "kafka.send10k.300", "`rdkafka_performance -P -D`", 0.6, ("msg/s", "msg/s")),
        ("registry", "token-registry: registrations acknowledged by Kafka", "ratio", "registry.register", "its cheapest read, `GET /v1/activities/{id}`", None, ("registrations/s", "reads/s")),
        ("dispatcher", "apns-dispatcher: Kafka → nginx 200 (1 KB, 2 connections), next to h2load", "ratio", "dispatcher.nginx.h2load", "h2load → the same nginx, `-c 2 -m 100`", None, ("pushes/s", "req/s")),
        ("dispatcher", "apns-dispatcher: the same, next to aioapns", "ratio", "dispatcher.nginx.aioapns", "aioapns → the same nginx, 2 connections", 4, ("pushes/s", "req/s")),
        ("dispatcher", "apns-dispatcher: CPU per push, everything included (Kafka in, decode, budget, HTTP/2, answer, outcome out)", "cpu", "dispatcher.nginx.h2load", "—", 60, ("µs/push", "")),
        ("dispatcher", "APNs simulator (validation on) under h2load, next to nginx (µs CPU each: the server's, not h2load's)", "rate", "simulator.h2load", "h2load → nginx, same run", 30_000, ("req/s", "req/s")),
        ("dispatcher", "apns-dispatcher: latency at 1,000 requests/s (produced → simulator)", "latency", "dispatcher", "—", None, ("", "")),
        ("content", "content-service: event → push request acknowledged", "ratio", "content.pipeline", "Kafka pass-through", None, ("events/s", "events/s")),
        ("content", "content-service: payload assembly", "figure", "content.assembly", "—", 30, ("µs/event", "")),
        ("content", "content-service: assembly with an inline thumbnail", "figure", "content.assembly_thumbnail", "—", None, ("µs/event", "")),
        ("analytics", "analytics-ingest: tap → click acknowledged by Kafka, closed loop (32 connections, each waiting for its answer)", "ratio", "analytics.taps", "its no-op route, `POST /bench/noop`, the same load", None, ("taps/s", "req/s")),
        ("analytics", "analytics-ingest: the highest tap rate with p99 ≤ 50 ms, open loop (constant rate, latency from each request's intended time)", "ratio", "analytics.open", "its no-op route, the same search", 0.5, ("taps/s", "req/s")),
        ("e2e", "end to end: event produced → push at the simulator, 1,000 events/s, on tansu (the tests' broker; its reads slow down as it fills)", "e2e", "e2e.tansu", None, None, ("", "")),
        ("e2e", "end to end: the same on librdkafka's mock cluster (a broker whose reads do not slow down)", "e2e", "e2e.mock", None, None, ("", "")),
        ("memory", "apns-dispatcher: memory per live activity (at 100,000 activities)", "memory", "apns-dispatcher", "—", None, ("", "")),
        ("memory", "content-service: memory per live activity (at 100,000 activities)", "memory", "content-service", "—", None, ("", "")),
    ]
    E2E_REFERENCE = "two Kafka hops: **not measured** (note 2)"
    E2E_TARGET = (18.0, 35.0)

    logs = {}
    def log_of(bench):
        if bench not in logs:
            logs[bench] = parse(bench)
        return logs[bench]

    rows, problems, first_of, unparsed = [], [], set(), {}
    for bench, what, kind, key, reference, target, (unit, ref_unit) in ROWS:
        st = status.get(bench)
        log_path = f"`{out_shown}/{bench}.log`"
        if bench not in first_of:
            first_of.add(bench)
            if st is None:
                where = "not run" + (" (not in `BENCHES`)" if chosen and bench not in chosen else "")
            elif st["rc"] == "missing":
                where = "`scripts/bench-memory.sh` is not in the repository yet"
            else:
                where = f"`{st['cmd']}` ({duration(st['seconds'])}); log {log_path}"
        else:
            where = "same run" if st is not None and st["rc"] != "missing" else "—"
        cells = {"islet": "—", "ref": reference or "—", "ratio": "—", "target": "—", "met": "—"}
        if kind == "ratio" and target is not None:
            cells["target"] = f"≥ {target:g}"
        if kind == "rate":
            cells["target"] = f"≥ {target:,} {unit}"
        if kind == "figure" and target is not None:
            cells["target"] = f"≤ {target:g} {unit.split('/')[0]}"
        if kind == "cpu":
            cells["target"] = f"≤ {target:g} µs"
        if kind == "e2e":
            cells["target"] = f"p50 ≤ {E2E_TARGET[0]:g} ms, p99 ≤ {E2E_TARGET[1]:g} ms"
            cells["ref"] = E2E_REFERENCE
        if st is None:
            cells["islet"] = "not run"
            if f"{bench}: not run" not in problems: problems.append(f"{bench}: not run")
        elif st["rc"] == "missing":
            cells["islet"] = "not measured: scripts/bench-memory.sh missing"
        elif st["rc"] != "0":
            rc = st["rc"]
            why = f"timed out (exit {rc})" if rc in ("124", "137") else f"exit {rc}"
            cells["islet"] = f"**failed** ({why})"
            cells["met"] = "**failed**"
            note = f"{bench}: failed ({why}), log {out_shown}/{bench}.log"
            if note not in problems: problems.append(note)
        else:
            found = log_of(bench)
            line_kind = {"ratio": "result", "rate": "result", "figure": "result", "cpu": "result", "latency": "latency", "e2e": "latency", "memory": "memory"}[kind]
            f = (found or {}).get((line_kind, key))
            try:
                if found is None:
                    raise ValueError("the log is missing:")
                if f is None:
                    raise ValueError(f"no `{line_kind}` line for `{key}`")
                if kind in ("ratio", "rate"):
                    islet, ref, ratio = num(f[0]), num(f[1]), num(f[2])
                    if islet is None or ref is None:
                        raise ValueError(f"`{key}`: not a number")
                    x = extras(f[3:])
                    detail = []
                    if "p99_ms" in x: detail.append(f"p99 {float(x['p99_ms']):.1f} ms")
                    if x.get("non2xx_errors", "0") != "0": detail.append(f"{x['non2xx_errors']} non-2xx/errors")
                    if "accepted" in x:
                        detail.append(f"{int(x['accepted']):,} accepted " + ("= on the topic" if x["accepted"] == x.get("on_topic") else f"≠ {int(x.get('on_topic', '0')):,} on the topic"))
                    if "answered" in x and "records" in x:
                        detail.append(f"{int(x['answered']):,} answered, {int(x['records']):,} records on the topic")
                    if "cpu_us" in x: detail.insert(0, f"{float(x['cpu_us']):,.1f} µs CPU each")
                    cells["islet"] = f"{n0(islet)} {unit}" + (f" ({'; '.join(detail)})" if detail else "")
                    ref_detail = f", p99 {float(x['ref_p99_ms']):.1f} ms" if "ref_p99_ms" in x else ""
                    if "ref_cpu_us" in x: ref_detail += f", {float(x['ref_cpu_us']):,.1f} µs CPU each"
                    cells["ref"] = f"{n0(ref)} {ref_unit}{ref_detail}: {reference}"
                    if kind == "rate":
                        if ratio is not None: cells["ratio"] = fmt_ratio(ratio, None)
                        cells["met"] = "yes" if islet >= target else "**no**"
                    elif ratio is not None:
                        cells["ratio"] = fmt_ratio(ratio, target)
                        if target is not None:
                            cells["met"] = "yes" if ratio >= target else "**no**"
                    elif target is not None:
                        cells["met"] = "**no** (no reference figure)"
                elif kind == "cpu":
                    cpu = num(extras(f[3:]).get("cpu_us"))
                    if cpu is None:
                        raise ValueError(f"`{key}`: no cpu_us")
                    cells["islet"] = f"{cpu:,.1f} {unit}"
                    cells["met"] = "yes" if cpu <= target else "**no**"
                elif kind == "figure":
                    v = num(f[0])
                    if v is None:
                        raise ValueError(f"`{key}`: not a number")
                    x = extras(f[3:])
                    cells["islet"] = f"{v:,.0f} {unit}" + (f" ({int(x['payload_bytes']):,}-byte payload)" if x.get("payload_bytes", "").isdigit() else "")
                    if target is not None:
                        cells["met"] = "yes" if v <= target else "**no**"
                elif kind in ("latency", "e2e"):
                    p50, p90, p99, mx = (num(v) for v in f[:4])
                    received, sent = int(f[4]), int(f[5])
                    cells["islet"] = f"p50 {ms(p50)}, p90 {ms(p90)}, p99 {ms(p99)}, max {ms(mx)} ({received:,} of {sent:,} received)"
                    if kind == "e2e":
                        broker = key.split(".", 1)[1]
                        hop = found.get(("latency", f"kafka.hop.{broker}"))
                        hop1 = found.get(("latency", f"kafka.hop.{broker}.linger1"))
                        if hop and num(hop[0]) is not None and num(hop[2]) is not None:
                            h50, h99 = num(hop[0]), num(hop[2])
                            if hop1 and num(hop1[0]) is not None and num(hop1[2]) is not None:
                                # The product's two hops, each with its own linger: the event's (5 ms), the push request's (1 ms).
                                r50, r99 = h50 + num(hop1[0]), h99 + num(hop1[2])
                                cells["ref"] = (f"the product's two Kafka hops on the same broker (rdkafka_performance -l, same run): the event's, linger 5 ms, p50 {ms(h50)}, p99 {ms(h99)}; "
                                                f"the push request's, linger 1 ms, p50 {ms(num(hop1[0]))}, p99 {ms(num(hop1[2]))}; summed p50 {ms(r50)}, p99 {ms(r99)} (at p99 an upper bound)")
                            else:  # an older log: one hop, doubled
                                r50, r99 = 2 * h50, 2 * h99
                                cells["ref"] = f"one Kafka hop on the same broker (rdkafka_performance -l, same run): p50 {ms(h50)}, p99 {ms(h99)}; two hops ≈ p50 {ms(r50)}, p99 {ms(r99)}"
                            cells["ratio"] = f"{p50 / r50:.1f} × (p50)" if p50 is not None and r50 else "—"
                        if p50 is None or p99 is None:
                            cells["met"] = "**no** (nothing received)"
                        elif received < sent:
                            cells["met"] = f"**no** ({sent - received:,} not received)"
                        else:
                            cells["met"] = "yes" if p50 <= E2E_TARGET[0] and p99 <= E2E_TARGET[1] else "**no**"
                elif kind == "memory":
                    per, base, at = (num(v) for v in f[:3])
                    if per is None or base is None or at is None:
                        raise ValueError(f"`{key}`: not a number")
                    count = (found.get(("activities", key)) or [None])[0]
                    with_what = f"with {int(count):,} activities" if count else "after"
                    cells["islet"] = f"{n0(per)} bytes/activity (RSS {mb(base)} before, {mb(at)} {with_what})"
            except Exception as e:  # a figure that cannot be read is a row that says so, never a crash
                why = str(e) if isinstance(e, ValueError) and str(e).startswith(("no ", "the log", "`")) else f"a malformed `{line_kind}` line for `{key}`"
                cells["islet"] = f"**not parsed**: {why} in {log_path}" if not why.endswith(":") else f"**not parsed**: {why} {log_path}"
                cells["met"] = "**not parsed**"
                unparsed.setdefault(bench, []).append(key)
        rows.append([what, cells["islet"], cells["ref"], cells["ratio"], cells["target"], cells["met"], where])

    def esc(cell): return cell.replace("|", "\\|")
    def when(iso):
        try:
            return datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            return None
    started, finished = when(meta.get("started", "")), when(meta.get("finished", ""))
    took = f", {duration((finished - started).total_seconds())}" if started and finished else " (did not finish)"
    build = status.get("build")
    build_text = "" if build is None else (f"; the release build before them {duration(build['seconds'])}" if build["rc"] == "0"
                                           else f"; the release build before them **failed** (log `{out_shown}/build.log`)")
    machine = ", ".join(x for x in [
        meta.get("cpu") or "CPU unknown", f"{meta.get('cpus', '?')} CPUs", meta.get("memory", "? GiB"), meta.get("os") or "OS unknown",
        f"Swift {meta.get('swift') or '?'}", f"librdkafka {meta.get('librdkafka') or '?'}", f"tansu {meta.get('tansu') or '?'} (in memory, loopback)"])
    commit = meta.get("commit", "?") + (" with uncommitted changes" if meta.get("dirty") == "yes" else "")

    lines = [
        "## Latest report: every benchmark next to its reference",
        "",
        "<!-- Generated by scripts/bench-report.sh: everything between the markers is rewritten; edit the script, not this text. -->",
        "",
        f"- **When**: {started.strftime('%Y-%m-%d %H:%M UTC') if started else '?'}{took}{build_text}.",
        f"- **Machine**: {machine}; load average {meta.get('load_start', '?')} at the start" + (f", {meta['load_end']} at the end" if meta.get("load_end") else "") + ".",
        f"- **Code**: commit {commit}.",
        f"- **Command**: `{meta.get('command', 'scripts/bench-report.sh')}`"
        + (f" (this section rewritten from its logs by `REPORT_ONLY=1 scripts/bench-report.sh`, {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')})" if report_only == "1" else "") + ".",
    ]
    if meta.get("quick") == "1":
        lines.append("- **QUICK=1**: the smallest sizes (one round, a few thousand messages, seconds of load), to check the script: **these figures measure nothing**.")
    lines += [
        "",
        "| benchmark | Islet | reference | ratio | target | met? | log / command |",
        "| --- | --- | --- | ---: | --- | --- | --- |",
    ]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    lines += [
        "",
        "1. Ratios are Islet / reference, each side the median of its rounds, measured in alternating rounds in the same run (a p99 next to a rate is the median of the rounds' p99), with two exceptions: the awaited `send` rows run after both produce runs of each round, and their reference is the median of the same rounds' `rdkafka_performance -P` runs, and the end-to-end reference is measured once, before the product. \"µs CPU each\" is the user + system time of that side's process divided by the operations — the service, or the reference client (the server's for the simulator's row; the dispatcher's over its whole life, start-up included; content-service's and the pass-through's over their first-to-last record) — which the noisy machine moves far less than a rate. The sections below describe each benchmark.",
        "2. The end-to-end figure crosses two Kafka hops (event → content-service, push request → apns-dispatcher). Its target assumes a floor of about 8 ms p50 / 15 ms p99 per hop with `fetch.wait.max.ms=10`; `scripts/bench-e2e.sh` measures both hops first, each on a fresh broker of the same kind at the same rate with the product's own settings (librdkafka's `rdkafka_performance -l`, the consumers' `fetch.wait.max.ms=10`; `linger.ms=5` for the event as the backend's producer sends it, `linger.ms=1` for the push request as content-service sends it), and the reference is their sum (at p99 an upper bound). It runs on two brokers: tansu, whose cost of reading a partition grows with what the partition holds, and librdkafka's mock cluster, whose does not (docs/operations.md).",
    ]
    for broker, name in (("tansu", "tansu"), ("mock", "the mock cluster")):
        detail = (log_of("e2e") or {}).get(("detail", broker))
        if detail:
            lines.append(f"   Where the end-to-end time went on {name}: " + "; ".join(esc(d) for d in detail) + ".")
    problems += [f"{bench}: not parsed ({', '.join(keys)})" for bench, keys in unparsed.items()]
    if problems:
        lines.append("3. Not measured in this run: " + "; ".join(problems) + ".")
    section = "\n".join(lines) + "\n"

    open(os.path.join(out, "section.md"), "w", encoding="utf-8").write(section)
    print(section)
    doc_path = doc if os.path.isabs(doc) else os.path.join(repo, doc)
    text = open(doc_path, encoding="utf-8").read()
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        sys.exit(f"bench-report: {doc} must hold {BEGIN} once, then {END} once; the section is in {out_shown}/section.md")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    tmp = doc_path + ".bench-report.tmp"
    open(tmp, "w", encoding="utf-8").write(head + BEGIN + "\n" + section + END + tail)
    os.replace(tmp, doc_path)
    print(f"bench-report: rewrote the section of {doc}" + (f"; not measured: {', '.join(p.split(':')[0] for p in problems)}" if problems else ""))
    sys.exit(1 if any("failed" in p or "not parsed" in p for p in problems) else 0)


def main():
    if len(sys.argv) == 7 and sys.argv[1] == "section":
        write_section(*sys.argv[2:7])
    elif len(sys.argv) >= 2 and sys.argv[1] == "busy-ports":
        busy_ports([int(p) for p in sys.argv[2:]])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
