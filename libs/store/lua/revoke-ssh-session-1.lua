--[[
  Marks an SSH session revoked (if it exists).
  KEYS[1] session hash (sg:ssh:{sha256(token)})
  No ARGV.
  Returns 1 it existed (and is now revoked), 0 it did not.
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'rev', '1')
return 1
