-- wrk script for bench/send_message.py: one SendMessage per request.
-- Arguments: TOKENS_FILE ("-" for none) TENANT ("-" for none) RUN_ID PUSH_CONFIG_JSON ("-" for none)
-- Each request takes the next token of the file (minted beforehand, one per request) and a new
-- messageId, so every request is a new turn with a token never used before.

local tokens, tenant, run_id, push = {}, nil, "", nil
local sent = 0
local threads = {}
reused, failed = 0, 0 -- globals: done() reads them from each thread

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  if args[1] ~= "-" then
    for line in io.lines(args[1]) do
      table.insert(tokens, line)
    end
  end
  if args[2] ~= "-" then tenant = args[2] end
  run_id = args[3]
  if args[4] ~= "-" then push = args[4] end
end

function request()
  sent = sent + 1
  local headers = { ["Content-Type"] = "application/json", ["A2A-Version"] = "1.0" }
  if #tokens > 0 then
    if sent > #tokens then reused = reused + 1 end
    headers["Authorization"] = "Bearer " .. tokens[((sent - 1) % #tokens) + 1]
  end
  local message = string.format(
    '{"messageId":"%s-%d","role":"ROLE_USER","parts":[{"text":"one two three"}]}', run_id, sent)
  local configuration = '"returnImmediately":true'
  if push then configuration = configuration .. ',"taskPushNotificationConfig":' .. push end
  local params = '"message":' .. message .. ',"configuration":{' .. configuration .. '}'
  if tenant then params = params .. ',"tenant":"' .. tenant .. '"' end
  local body = '{"jsonrpc":"2.0","id":' .. sent .. ',"method":"SendMessage","params":{' .. params .. '}}'
  return wrk.format("POST", nil, headers, body)
end

function response(status, headers, body)
  if status ~= 200 or not string.find(body, '"result"', 1, true) then failed = failed + 1 end
end

function done(summary, latency, requests)
  local reuses, failures = 0, 0
  for _, thread in ipairs(threads) do
    reuses = reuses + thread:get("reused")
    failures = failures + thread:get("failed")
  end
  io.write(string.format("RESULT %d %.0f %.3f %.3f %d %d\n", summary.requests, summary.duration,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, failures, reuses))
end
