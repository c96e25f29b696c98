-- wrk: every request registers a new activity's update token (so every one is a Kafka write), for
-- one of many users in turn, as an app's users would: token-registry takes one registration of a
-- user at a time (so that parallel ones cannot pass the user's quota together), so a single user
-- would measure that queue, not the service.
-- BENCH_JWTS (a file of bearer JWTs, one user per line) and BENCH_RUN (unique per run) come from
-- the environment.
-- thread_id is a global on purpose: setup() sets it in each thread's own Lua state with thread:set,
-- which only a global sees (a `local thread_id` here would stay 0 in both threads, so both would
-- register the same activities, and every second registration would be a repeat that writes nothing).
local counter = 0
local threads = {}

function setup(thread)
  thread:set("thread_id", #threads)
  table.insert(threads, thread)
end

function init(args)
  jwts = {}
  for line in io.lines(os.getenv("BENCH_JWTS")) do table.insert(jwts, line) end
  run = os.getenv("BENCH_RUN")
  token = string.rep("ab", 80)
  body = '{"token":"' .. token .. '","attributesType":"DeliveryAttributes",' ..
         '"app":{"bundleId":"com.example.food","environment":"production"},' ..
         '"frequentUpdatesEnabled":false,"appVersion":"5.2.0"}'
end

function request()
  counter = counter + 1
  local path = "/v1/activities/" .. run .. "-" .. thread_id .. "-" .. counter .. "/token"
  -- Each thread walks its own half of the users.
  local jwt = jwts[((counter * 2 + thread_id) % #jwts) + 1]
  return wrk.format("PUT", path, {["Authorization"] = "Bearer " .. jwt, ["Content-Type"] = "application/json"}, body)
end

function done(summary, latency, requests)
  io.write(string.format('{"requests":%d,"seconds":%.3f,"non2xx":%d,"errors":%d,"p50ms":%.3f,"p99ms":%.3f}\n',
    summary.requests, summary.duration / 1e6, summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
