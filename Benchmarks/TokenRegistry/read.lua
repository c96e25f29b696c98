-- wrk: the cheapest authenticated route that writes nothing — reading an activity's state
-- (JWT verification, routing, a table lookup, JSON encoding). BENCH_JWT and BENCH_ACTIVITY come
-- from the environment.
function init(args)
  jwt = os.getenv("BENCH_JWT")
  path = "/v1/activities/" .. os.getenv("BENCH_ACTIVITY")
end

function request()
  return wrk.format("GET", path, {["Authorization"] = "Bearer " .. jwt})
end

function done(summary, latency, requests)
  io.write(string.format('{"requests":%d,"seconds":%.3f,"non2xx":%d,"errors":%d,"p50ms":%.3f,"p99ms":%.3f}\n',
    summary.requests, summary.duration / 1e6, summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
