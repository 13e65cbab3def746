--[[
  A sandbox create's third step: adds the id to the cluster-wide id set (listing, the sweep),
  only within `window` ms of the reservation, for the reason create-sandbox-record-2 says.
  KEYS[1] id set (sg:sbxs)
  ARGV[1] id, ARGV[2] reserved at (ms), ARGV[3] window (ms)
  Returns 1 listed, -1 too late.
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > tonumber(ARGV[2]) + tonumber(ARGV[3]) then return -1 end
redis.call('SADD', KEYS[1], ARGV[1])
return 1
