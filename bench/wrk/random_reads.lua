-- wrk script for bench/rest_latency.py: random reads of one endpoint with a bearer token, and the
-- latency percentiles printed as one JSON line when the run ends.
local token = os.getenv("CAIRN_TOKEN")
local kind = os.getenv("CAIRN_ENDPOINT")
local experiments = tonumber(os.getenv("CAIRN_EXPERIMENTS"))
local trials = tonumber(os.getenv("CAIRN_TRIALS"))
-- 0: every item equally likely; N: only the first N (pages, experiments, trials): a hot set.
local hot = tonumber(os.getenv("CAIRN_WORKING_SET") or "0")
if hot > 0 then
  experiments = math.min(experiments, hot * 100 + 100)
  trials = math.min(trials, hot)
end
local pages = hot > 0 and hot or nil
local headers = { ["Authorization"] = "Bearer " .. token }
-- Determined's k6 load model: each virtual user sends a suite of requests back to back, then sleeps.
-- 0 requests per iteration: a closed loop with no sleep at all. Run with one connection per wrk
-- thread (-t N -c N): each thread has its own Lua state, so the counter is its connection's.
local per_iteration = tonumber(os.getenv("CAIRN_ITERATION") or "0")
local sleep_ms = tonumber(os.getenv("CAIRN_SLEEP_MS") or "0")
local sent = 0

function delay()
  if per_iteration > 0 and sent > 0 and sent % per_iteration == 0 then
    return sleep_ms
  end
  return 0
end

function init(args)
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
end

function request()
  sent = sent + 1
  local path
  if kind == "experiments" then
    local offset = pages and (100 * math.random(0, pages - 1)) or math.random(0, math.max(0, experiments - 100))
    path = "/api/v1/experiments?limit=100&orderBy=ORDER_BY_DESC&sortBy=SORT_BY_ID&offset=" .. offset
  elseif kind == "trials" then
    path = "/api/v1/experiments/" .. math.random(1, pages and hot or experiments) .. "/trials"
  else
    path = "/api/v1/trials/metrics/trial_metrics?group=validation&trialIds=" .. math.random(1, trials)
  end
  return wrk.format("GET", path, headers)
end

function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    '{"requests": %d, "non_2xx": %d, "socket_errors": %d, "p50_ms": %.2f, "p95_ms": %.2f, "p99_ms": %.2f, "mean_ms": %.2f, "duration_s": %.1f}\n',
    summary.requests, errors.status, errors.connect + errors.read + errors.write + errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(95) / 1000, latency:percentile(99) / 1000,
    latency.mean / 1000, summary.duration / 1e6))
end
