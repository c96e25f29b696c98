-- wrk: every request registers a new activity's update token (so every one is a Kafka write).
-- BENCH_JWT (bearer) and BENCH_RUN (unique per run) come from the environment.
local counter = 0
local thread_id = 0
local threads = {}

function setup(thread)
  thread:set("thread_id", #threads)
  table.insert(threads, thread)
end

function init(args)
  jwt = os.getenv("BENCH_JWT")
  run = os.getenv("BENCH_RUN")
  token = string.rep("ab", 80)
  body = '{"token":"' .. token .. '","attributesType":"DeliveryAttributes",' ..
         '"app":{"bundleId":"com.example.food","environment":"production"},' ..
         '"frequentUpdatesEnabled":false,"appVersion":"5.2.0"}'
end

function request()
  counter = counter + 1
  local path = "/v1/activities/" .. run .. "-" .. thread_id .. "-" .. counter .. "/token"
  return wrk.format("PUT", path, {["Authorization"] = "Bearer " .. jwt, ["Content-Type"] = "application/json"}, body)
end

function done(summary, latency, requests)
  io.write(string.format('{"requests":%d,"seconds":%.3f,"non2xx":%d,"errors":%d,"p50ms":%.3f,"p99ms":%.3f}\n',
    summary.requests, summary.duration / 1e6, summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
