--[[
  May a deleted pool's name leave the index? Only once it has no definition (a SetPool since
  brings it back) and no member left. The index is another slot on a cluster, so the caller
  removes the name itself and looks again (PoolStore.forget): SetPool writes the definition
  before the index, so a SetPool racing the removal is seen by that second look.
  KEYS[1] pool hash (sg:pool:{name}), KEYS[2] member set (sg:wssbx:pool:{name})
  Returns 1 it may, 0 it must stay.
]]
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('SCARD', KEYS[2]) > 0 then return 0 end
return 1
