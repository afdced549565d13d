-- Release: delete the record if `owner` holds it in progress; a record already gone is released.
-- KEYS[1] the record's key
-- ARGV: owner
-- Returns 0 released (or gone), 2 another owner's, 3 completed (never released), 4 malformed.
local f = redis.call('HMGET', KEYS[1], 'status', 'owner')
local status, owner = f[1], f[2]
if not status and not owner then return 0 end
if status == 'COMPLETED' then return 3 end
if owner ~= ARGV[1] then return 2 end
if status ~= 'IN_PROGRESS' then return 4 end
redis.call('DEL', KEYS[1])
return 0
