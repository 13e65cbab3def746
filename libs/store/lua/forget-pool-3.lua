--[[
  Drops a deleted pool's name from the index once it has no definition (a SetPool since brings it
  back) and no member left.
  KEYS[1] pool hash (sg:pool:{name})
  KEYS[2] member set (sg:wssbx:pool:{name})
  KEYS[3] pool index (sg:pools)
  ARGV[1] pool name
  Returns 1 forgotten, 0 kept.
]]
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('SCARD', KEYS[2]) > 0 then return 0 end
return redis.call('SREM', KEYS[3], ARGV[1])
