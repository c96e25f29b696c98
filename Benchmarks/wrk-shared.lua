-- What the wrk scripts of Benchmarks/ share. Each loads it by its own path (wrk runs a script in a
-- Lua state per thread and one for setup, and each state loads it), so it works from any directory:
--
--   local shared = dofile(debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") .. "../wrk-shared.lua")
--   setup = shared.setup  -- only where requests need a thread_id
--   done = shared.done
local shared = {}
local threads = {}

-- Sets a global thread_id (0, 1, …) in each of wrk's threads: thread:set sets a global of that
-- thread's own Lua state, which only a global sees (a `local thread_id` would stay 0 in every thread).
function shared.setup(thread)
  thread:set("thread_id", #threads)
  table.insert(threads, thread)
end

-- One line of JSON that scripts/bench_*.py read: requests, seconds, non-2xx answers, socket errors,
-- p50 and p99 latency in milliseconds.
function shared.done(summary, latency, requests)
  io.write(string.format('{"requests":%d,"seconds":%.3f,"non2xx":%d,"errors":%d,"p50ms":%.3f,"p99ms":%.3f}\n',
    summary.requests, summary.duration / 1e6, summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end

return shared
