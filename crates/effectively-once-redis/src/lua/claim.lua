-- Claim: write the record IN_PROGRESS unless a record blocks it at the caller's clock.
-- KEYS[1] the record's key
-- ARGV: now_ms, now_s, ttl_ms, lease_expires_at (ms), expiration (s), payload_hash, owner
-- Returns {1, old fields} when written (old fields empty when there was none), {0, fields} when
-- a record blocks: the blocking or replaced record in the same atomic step, so a duplicate costs
-- one round trip and a takeover knows whom it replaced.
local old = redis.call('HGETALL', KEYS[1])
if #old > 0 then
  local f = {}
  for i = 1, #old, 2 do f[old[i]] = old[i + 1] end
  -- The same predicate as Record::blocks_claim_at, on the caller's clock (not the server's
  -- TIME): the record expires for claims when its dedup window ends as the caller counts it.
  -- A field that is not a number never unblocks: a malformed record blocks and is reported.
  local expired = is_uint(f.expiration) and lt(f.expiration, ARGV[2])
  local lease_over = f.status == 'IN_PROGRESS' and is_uint(f.lease_expires_at) and lt(f.lease_expires_at, ARGV[1])
  if not (expired or lease_over) then
    return {0, old}
  end
  -- A takeover: no field of the old record may survive into the new one.
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'status', 'IN_PROGRESS', 'lease_expires_at', ARGV[4], 'expiration', ARGV[5],
  'payload_hash', ARGV[6], 'owner', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, old}
