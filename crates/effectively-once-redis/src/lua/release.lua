-- Release: delete the record if `owner` holds it in progress, leaving a fence of that owner (see
-- common.lua); a record already gone is released.
-- KEYS[1] the record's key
-- ARGV: owner, grace_ms
-- Returns 0 released (or gone), 2 another owner's, 3 completed (never released), 4 malformed.
local f = redis.call('HMGET', KEYS[1], 'status', 'owner', 'lease_expires_at')
local status, owner, lease = f[1], f[2], f[3]
if not status and not owner then return 0 end
if status == 'COMPLETED' then return 3 end
if owner ~= ARGV[1] then return 2 end
if status ~= 'IN_PROGRESS' then return 4 end
-- The fence lasts until the lease's end plus the grace (the lease is in the claimer's clock: a
-- claimer within the grace of the server's clock ends it by then on the server's), and at least
-- the grace from now: a late copy of the claim is one that ran late on the server, and after
-- the lease it would still make the next taker believe it took over a crashed attempt.
local now = server_now_ms()
local lease_ms = (is_uint(lease) and tonumber(lease)) or 0
local fence = math.min(math.max(lease_ms, now) + tonumber(ARGV[2]), now + MAX_TTL_MS)
-- Delete every field of the record; keep the other owners' fences that still hold.
local kept = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if is_fence(all[i]) and (tonumber(all[i + 1]) or 0) > now then
    kept[#kept + 1] = all[i]; kept[#kept + 1] = all[i + 1]
  end
end
redis.call('DEL', KEYS[1])
for i = 1, #kept, 2 do redis.call('HSET', KEYS[1], kept[i], kept[i + 1]) end
local latest = math.max(fence, tonumber(redis.call('HGET', KEYS[1], 'released_until') or '0') or 0)
redis.call('HSET', KEYS[1], FENCE .. ARGV[1], string.format('%d', fence), 'released_until', string.format('%d', latest))
-- No record, so no window: the key lives as long as its fences (`expire` keeps it to
-- `released_until`).
expire(KEYS[1], '1', '0')
return 0
