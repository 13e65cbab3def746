--[[
  DEBUG ONLY (debug break "fencing"): renew-many-n without the fence check.
  KEYS    pairs: owner hash, fence counter (unused) per session
  ARGV    as renew-many-n (only ARGV[1], the owner TTL in ms, is used)
  Returns an array of 1 (renewed), one per session.
]]
local out = {}
for i = 1, #KEYS / 2 do
  redis.call('PEXPIRE', KEYS[2 * i - 1], ARGV[1])
  out[i] = 1
end
return out
