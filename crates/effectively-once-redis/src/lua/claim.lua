-- Claim: write the record IN_PROGRESS unless a record blocks it at the caller's clock.
-- KEYS[1] the record's key
-- ARGV: now_ms, now_s, ttl_ms, lease_expires_at (ms), expiration (s), payload_hash, owner,
-- deadline_ms (the window's end plus the grace: see `expire`)
-- Returns {code, replaced, first}: code 1 when written, 0 when a record blocks (replaced is then
-- the blocking record: a duplicate costs one round trip), 2 when the record is the caller's own,
-- in progress (a resent claim whose first send landed), 3 when the owner released its record (a
-- late copy of its claim: nothing written, see the fences in common.lua). For 1 and 2, replaced
-- is the record the write replaced (empty when the key was free) and first the record its run
-- of takeovers began with (empty when that is replaced itself): effectively_once::protocol::claim's
-- answer.
local now = server_now_ms()
-- The record's fields (old, and by name f), apart from the fences of released owners; fences
-- that have ended are dropped.
local old, f, fenced = {}, {}, false
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local name, value = all[i], all[i + 1]
  if not is_fence(name) then
    old[#old + 1] = name; old[#old + 1] = value; f[name] = value
  elseif (tonumber(value) or 0) <= now then
    redis.call('HDEL', KEYS[1], name)
  elseif name == FENCE .. ARGV[7] then
    fenced = true
  end
end
-- A released owner's claim writes nothing, whatever the key holds: it can only be a late copy.
if fenced then return {3, {}, {}} end
-- The fields a record keeps, while in progress, of the record its claim replaced (replaced_*)
-- and of the one its run of takeovers began with (first_*).
local KEPT = {'status', 'lease_expires_at', 'expiration', 'payload_hash', 'owner', 'response'}
local function copy(fields, prefix)
  local out = {}
  for _, name in ipairs(KEPT) do
    local value = fields[prefix .. name]
    if value then out[#out + 1] = name; out[#out + 1] = value end
  end
  return out
end
if #old == 0 then
  redis.call('HSET', KEYS[1], 'replaced', '0')
else
  -- Never over the caller's own record: a resent claim must learn what its first write
  -- replaced, not replace that write.
  if f.owner == ARGV[7] then
    if f.status == 'IN_PROGRESS' and f.replaced == '0' then return {2, {}, {}} end
    if f.status == 'IN_PROGRESS' and f.replaced == '1' then
      return {2, copy(f, 'replaced_'), copy(f, 'first_')}
    end
    return {0, old, {}}
  end
  -- The same predicate as Record::blocks_claim_at, on the caller's clock (not the server's
  -- TIME): the record expires for claims when its dedup window ends as the caller counts it.
  -- A field that is not a number never unblocks: a malformed record blocks and is reported.
  local expired = is_uint(f.expiration) and lt(f.expiration, ARGV[2])
  local lease_over = f.status == 'IN_PROGRESS' and is_uint(f.lease_expires_at) and lt(f.lease_expires_at, ARGV[1])
  if not (expired or lease_over) then
    return {0, old, {}}
  end
  -- A record in progress that had taken the key over itself passes on its run's first record.
  local first = {}
  if f.status == 'IN_PROGRESS' and f.replaced == '1' then first = copy(f, 'first_') end
  if #first == 0 and f.status == 'IN_PROGRESS' and f.replaced == '1' then first = copy(f, 'replaced_') end
  -- A takeover: no field of the old record may survive into the new one but the kept copies
  -- (the fences stay: they are no part of the record).
  for i = 1, #old, 2 do redis.call('HDEL', KEYS[1], old[i]) end
  redis.call('HSET', KEYS[1], 'replaced', '1')
  for _, name in ipairs(KEPT) do
    if f[name] then redis.call('HSET', KEYS[1], 'replaced_' .. name, f[name]) end
  end
  for i = 1, #first, 2 do redis.call('HSET', KEYS[1], 'first_' .. first[i], first[i + 1]) end
  redis.call('HSET', KEYS[1], 'status', 'IN_PROGRESS', 'lease_expires_at', ARGV[4], 'expiration', ARGV[5],
    'payload_hash', ARGV[6], 'owner', ARGV[7])
  expire(KEYS[1], ARGV[3], ARGV[8])
  -- Stripped of its own copies: the answer is the record as it stood.
  local plain = {}
  for _, name in ipairs(KEPT) do
    if f[name] then plain[#plain + 1] = name; plain[#plain + 1] = f[name] end
  end
  return {1, plain, first}
end
redis.call('HSET', KEYS[1], 'status', 'IN_PROGRESS', 'lease_expires_at', ARGV[4], 'expiration', ARGV[5],
  'payload_hash', ARGV[6], 'owner', ARGV[7])
expire(KEYS[1], ARGV[3], ARGV[8])
return {1, {}, {}}
