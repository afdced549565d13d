-- Complete: mark the record COMPLETED if `owner` holds it in progress within its lease.
-- KEYS[1] the record's key
-- ARGV: owner, now_ms, ttl_ms, expiration (s), has_response ('1' or '0'), response,
-- deadline_ms (the new window's end plus the grace: see `expire`)
-- Returns 0 done (or already completed by this owner: a retry whose answer was lost),
-- 1 no record, 2 another owner's, 3 the lease ended, 4 malformed.
local f = redis.call('HMGET', KEYS[1], 'status', 'owner', 'lease_expires_at')
local status, owner, lease = f[1], f[2], f[3]
-- Never recreate a record: one that is gone (released, or expired out of the server) stays gone,
-- and HSET on a missing key would write a record with no claim behind it.
if not status and not owner then return 1 end
if owner ~= ARGV[1] then return 2 end
if status == 'COMPLETED' then return 0 end
if status ~= 'IN_PROGRESS' or not is_uint(lease) then return 4 end
-- lease >= now_ms completes; a lease that ended is refused even with no takeover yet.
if lt(lease, ARGV[2]) then return 3 end
redis.call('HSET', KEYS[1], 'status', 'COMPLETED', 'expiration', ARGV[4])
-- Only a resent claim reads the copy of the replaced record; a completed record drops it.
for _, prefix in ipairs({'replaced_', 'first_'}) do
  redis.call('HDEL', KEYS[1], prefix .. 'status', prefix .. 'lease_expires_at', prefix .. 'expiration',
    prefix .. 'payload_hash', prefix .. 'owner', prefix .. 'response')
end
redis.call('HDEL', KEYS[1], 'replaced')
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[1], 'response', ARGV[6])
else
  redis.call('HDEL', KEYS[1], 'response')
end
-- The dedup window restarts at completion: the key lives as long as the new expiration.
expire(KEYS[1], ARGV[3], ARGV[7])
return 0
