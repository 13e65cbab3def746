--[[
  Deletes the owner record if the caller's fence is still current.
  KEYS[1] owner hash (sg:own:{id})
  ARGV[1] the caller's fence
  Returns 1 released, 0 not the owner (superseded or gone).
]]
if redis.call('HGET', KEYS[1], 'fence') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
