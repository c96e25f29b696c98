-- wrk: one tap per request, each a new tap (a distinct tap time), so every accepted one is a
-- Kafka write. BENCH_PATH is /v1/taps (the real route) or /bench/noop (the reference: reads the
-- same body, answers 204). BENCH_LINKS names a file of signed links (one per line; each of wrk's
-- two threads walks its own half, so a link comes again only after many others: the service counts
-- a link at most once a second), BENCH_ISSUED the epoch seconds they were issued at,
-- BENCH_OFFSET_MS where this run's tap times start.
local shared = dofile(debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") .. "../wrk-shared.lua")
setup = shared.setup  -- a global thread_id in each thread
done = shared.done  -- the JSON line

function init(args)
  path = os.getenv("BENCH_PATH")
  local all = {}
  for url in io.lines(os.getenv("BENCH_LINKS")) do table.insert(all, url) end
  local half = math.floor(#all / 2)
  urls = {}
  for i = 1, half do urls[i] = all[thread_id * half + i] end
  issued = tonumber(os.getenv("BENCH_ISSUED"))
  -- Each thread takes its own 4-hour window of tap times, in milliseconds.
  base = tonumber(os.getenv("BENCH_OFFSET_MS")) + thread_id * 4 * 3600 * 1000
  counter = 0
  headers = {["Content-Type"] = "application/json"}
end

function request()
  counter = counter + 1
  local ms = base + counter
  local seconds = issued + math.floor(ms / 1000)
  local tapped = os.date("!%Y-%m-%dT%H:%M:%S", seconds) .. string.format(".%03dZ", ms % 1000)
  local url = urls[(counter % #urls) + 1]
  local body = '{"url":"' .. url .. '","tappedAt":"' .. tapped .. '","appVersion":"5.2.0","osVersion":"18.1"}'
  return wrk.format("POST", path, headers, body)
end
