-- wrk: every request registers a new activity's update token (so every one is a Kafka write), for
-- one of many users in turn, as an app's users would: token-registry takes one registration of a
-- user at a time (so that parallel ones cannot pass the user's quota together), so a single user
-- would measure that queue, not the service.
-- BENCH_JWTS (a file of bearer JWTs, one user per line) and BENCH_RUN (unique per run) come from
-- the environment.
-- thread_id is a global on purpose: setup() (wrk-shared.lua) sets it in each thread's own Lua
-- state with thread:set, which only a global sees (a `local thread_id` here would stay 0 in both
-- threads, so both would register the same activities, and every second registration would be a
-- repeat that writes nothing).
local shared = dofile(debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") .. "../wrk-shared.lua")
setup = shared.setup
done = shared.done  -- the JSON line
local counter = 0

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
