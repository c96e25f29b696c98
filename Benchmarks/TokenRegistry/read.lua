-- wrk: the cheapest authenticated route that writes nothing — reading an activity's state
-- (JWT verification, routing, a table lookup, JSON encoding). BENCH_JWT and BENCH_ACTIVITY come
-- from the environment.
local shared = dofile(debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") .. "../wrk-shared.lua")
done = shared.done  -- the JSON line

function init(args)
  jwt = os.getenv("BENCH_JWT")
  path = "/v1/activities/" .. os.getenv("BENCH_ACTIVITY")
end

function request()
  return wrk.format("GET", path, {["Authorization"] = "Bearer " .. jwt})
end
