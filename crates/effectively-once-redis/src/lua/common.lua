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
