-- Shared by the three scripts (prepended to each at build time).
-- Numbers are compared as decimal strings: Lua numbers are doubles, exact only below 2^53, and a
-- record's fields are u64 (a window "forever" is u64::MAX / 2 s).

-- Whether `s` is a canonical decimal u64: digits, no leading zero, at most 20 of them.
local function is_uint(s)
  return type(s) == 'string' and #s > 0 and #s <= 20 and s:match('^%d+$') ~= nil
    and (#s == 1 or s:sub(1, 1) ~= '0')
end

-- a < b for canonical decimal strings.
local function lt(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end

-- A key's longest time to live (ms), about 100 years: the store's MAX_TTL_MS.
local MAX_TTL_MS = 3153600000000

-- The server's clock, in ms since the Unix epoch. Reading it and then writing is allowed as
-- scripts are replicated by their effects (the default from Redis 5, the only way from 7).
local function server_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Sets the key's time to live: `caller_ttl` (ms, counted on the writer's clock by the store), or,
-- if longer, until `deadline` (ms since the epoch, the record's window end plus the grace) on
-- the server's clock. Why both: the window end is an absolute time stated in the writer's
-- clock, and other callers judge it on theirs. A writer whose clock runs ahead of the others'
-- would, from its own clock alone, set a TTL that ends the key before the window ends by theirs
-- (a duplicate then finds the key free and runs again); one whose clock runs behind (or a test
-- clock in the past) is served by its own count. With the longer of the two, the key outlives
-- the window end as judged by the writer and by any caller whose clock is within the grace of
-- the server's. A longer life is harmless: claims read the window from the record.
--
-- Never shorter than the key's fences need (see below): `released_until` is the latest.
local function expire(key, caller_ttl, deadline)
  local now = server_now_ms()
  local fenced_until = tonumber(redis.call('HGET', key, 'released_until') or '0') or 0
  local ttl = math.max(tonumber(caller_ttl), tonumber(deadline) - now, fenced_until - now)
  ttl = math.min(math.max(ttl, 1), MAX_TTL_MS)
  redis.call('PEXPIRE', key, string.format('%d', ttl))
end

-- Fences of released owners, kept in the record's hash beside (or without) a record:
-- `released:{owner}` holds the server time (ms) until which a claim by that owner writes nothing,
-- and `released_until` the latest of them. Why: the store resends a script whose connection died,
-- and the first send may still reach the server late, after its resend was answered, the
-- handler failed and the attempt released its record. Without a fence that late claim would
-- recreate the released record in progress, blocking the key until its lease ends and then making
-- the next taker believe it took over a crashed attempt. Owners are unique per attempt, so no
-- live claim is ever fenced. A fence is no record: `get` and the scripts see past it.
local FENCE = 'released:'
local function is_fence(name)
  return name == 'released_until' or name:sub(1, #FENCE) == FENCE
end
