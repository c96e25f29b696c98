#!/usr/bin/env python3
"""The Python of scripts/bench-registry.sh.

  bench_registry.py jwt SECRET
      prints an HS256 JWT (key id "bench") for the user bench-user, valid for an hour.
  bench_registry.py jwts SECRET COUNT
      prints COUNT such JWTs, one per line, for the users bench-user-0 … bench-user-(COUNT-1).
  bench_registry.py summary RESULTS.tsv WARM_UP_JSON ON_TOPIC
      prints the medians of the rounds (wrk's JSON lines, each with the service's CPU seconds
      during it: round<TAB>register<TAB>read), the ratio register / read, the service's CPU per
      request on each route, a machine-readable `result` line for scripts/bench-report.sh and one
      `RESULT registry key=value …` line; exits 1 when the topic holds fewer records (ON_TOPIC)
      than the registrations answered (the rounds', the warm-up's and the read route's one), as it
      would if registrations were answered without a Kafka write.
"""
import base64, hashlib, hmac, json, statistics, sys, time


def token(secret, user):
    enc = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
    header = enc(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "bench"}).encode())
    claims = enc(json.dumps({"sub": user, "exp": int(time.time()) + 3600}).encode())
    signature = enc(hmac.new(secret.encode(), f"{header}.{claims}".encode(), hashlib.sha256).digest())
    return f"{header}.{claims}.{signature}"


def jwt(secret):
    print(token(secret, "bench-user"))


def jwts(secret, count):
    print("\n".join(token(secret, f"bench-user-{i}") for i in range(int(count))))


def summary(results, warm_up, on_topic):
    rows = [line.split("\t") for line in open(results).read().splitlines() if line]
    w = [json.loads(r[1]) for r in rows]; g = [json.loads(r[2]) for r in rows]
    rate = lambda x: x["requests"] / x["seconds"]
    cpu = lambda x: x["cpu"] / x["requests"] * 1e6  # µs of the service's CPU per request
    med = lambda xs, f: statistics.median(f(x) for x in xs)
    for name, xs in (("register (PUT, Kafka write)", w), ("read (GET, no write)", g)):
        bad = sum(x["non2xx"] + x["errors"] for x in xs)
        print(f"{name:<30} {med(xs, rate):>10,.0f} req/s   p50 {med(xs, lambda x: x['p50ms']):6.2f} ms   p99 {med(xs, lambda x: x['p99ms']):6.2f} ms"
              f"   {med(xs, cpu):6.1f} µs CPU per request   non-2xx/errors {bad}")
    print(f"ratio register / read: {med(w, rate) / med(g, rate):.2f}   (medians over {len(rows)} rounds)")
    # Every answered registration (2xx) a record: the rounds', the warm-up's, and the read route's activity.
    answered = sum(x["requests"] - x["non2xx"] for x in w + [json.loads(warm_up)]) + 1
    on_topic = int(on_topic)
    written = on_topic >= answered
    print(f"registrations answered: {answered:,}; records on islet.tokens.v1: {on_topic:,}"
          + ("" if written else "   FAILED: registrations were answered without a Kafka write"))
    # A machine-readable line for scripts/bench-report.sh: result, name, islet, reference, ratio, then details.
    bad = sum(x["non2xx"] + x["errors"] for x in w + g)
    print(f"result\tregistry.register\t{med(w, rate):.0f}\t{med(g, rate):.0f}\t{med(w, rate) / med(g, rate):.4f}\trounds={len(rows)}"
          f"\tp50_ms={med(w, lambda x: x['p50ms']):.2f}\tp99_ms={med(w, lambda x: x['p99ms']):.2f}\tref_p99_ms={med(g, lambda x: x['p99ms']):.2f}\tnon2xx_errors={bad}"
          f"\tcpu_us={med(w, cpu):.1f}\tref_cpu_us={med(g, cpu):.1f}\tanswered={answered}\trecords={on_topic}")
    print(f"RESULT registry register_per_s={med(w, rate):.0f} read_per_s={med(g, rate):.0f} ratio={med(w, rate) / med(g, rate):.3f}"
          f" register_p99_ms={med(w, lambda x: x['p99ms']):.2f} read_p99_ms={med(g, lambda x: x['p99ms']):.2f}"
          f" register_cpu_us={med(w, cpu):.1f} read_cpu_us={med(g, cpu):.1f} answered={answered} records={on_topic} non2xx_errors={bad}")
    if not written:
        sys.exit(1)


if __name__ == "__main__":
    commands = {"jwt": (jwt, 1), "jwts": (jwts, 2), "summary": (summary, 3)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or len(sys.argv) != 2 + commands[sys.argv[1]][1]:
        sys.exit(__doc__)
    commands[sys.argv[1]][0](*sys.argv[2:])
