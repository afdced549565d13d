-- Claim: write the record IN_PROGRESS unless a record blocks it at the caller's clock.
-- KEYS[1] the record's key
-- ARGV: now_ms, now_s, ttl_ms, lease_expires_at (ms), expiration (s), payload_hash, owner
-- Returns {1, old fields} when written (old fields empty when there was none), {0, fields} when
-- a record blocks: the blocking or replaced record in the same atomic step, so a duplicate costs
-- one round trip and a takeover knows whom it replaced. {2, fields} when the record is the
-- caller's own, in progress (a resent claim whose first send landed): the fields of the record
-- that first write replaced, kept with it (empty when the key was free), as the lost answer said.
local old = redis.call('HGETALL', KEYS[1])
-- The fields a record keeps of the one its claim replaced, until it is completed.
local KEPT = {'status', 'lease_expires_at', 'expiration', 'payload_hash', 'owner', 'response'}
if #old > 0 then
  local f = {}
  for i = 1, #old, 2 do f[old[i]] = old[i + 1] end
  -- Never over the caller's own record: a resent claim must learn what its first write
  -- replaced, not replace that write (effectively_once::protocol::claim).
  if f.owner == ARGV[7] then
    if f.status == 'IN_PROGRESS' and (f.replaced == '0' or f.replaced == '1') then
      local was = {}
      if f.replaced == '1' then
        for _, name in ipairs(KEPT) do
          local value = f['replaced_' .. name]
          if value then was[#was + 1] = name; was[#was + 1] = value end
        end
      end
      return {2, was}
    end
    return {0, old}
  end
  -- The same predicate as Record::blocks_claim_at, on the caller's clock (not the server's
  -- TIME): the record expires for claims when its dedup window ends as the caller counts it.
  -- A field that is not a number never unblocks: a malformed record blocks and is reported.
  local expired = is_uint(f.expiration) and lt(f.expiration, ARGV[2])
  local lease_over = f.status == 'IN_PROGRESS' and is_uint(f.lease_expires_at) and lt(f.lease_expires_at, ARGV[1])
  if not (expired or lease_over) then
    return {0, old}
  end
  -- A takeover: no field of the old record may survive into the new one but the kept copy.
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'replaced', '1')
  for _, name in ipairs(KEPT) do
    if f[name] then redis.call('HSET', KEYS[1], 'replaced_' .. name, f[name]) end
  end
else
  redis.call('HSET', KEYS[1], 'replaced', '0')
end
redis.call('HSET', KEYS[1], 'status', 'IN_PROGRESS', 'lease_expires_at', ARGV[4], 'expiration', ARGV[5],
  'payload_hash', ARGV[6], 'owner', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, old}
