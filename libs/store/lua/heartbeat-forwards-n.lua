--[[
  Refreshes the heartbeat of live forwards, on Redis' clock (TIME). Only members still present
  are refreshed: a heartbeat never resurrects a released or pruned forward.
  KEYS    forward sets (by token or by sandbox), one per forward id; all of one slot on a
          cluster (the caller groups them: groupedByTag)
  ARGV[1] key TTL (ms)
  ARGV    then the forward id of each key, in order
  Returns the number of keys given.
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', now, ARGV[i + 1])
  redis.call('PEXPIRE', KEYS[i], ARGV[1])
end
return #KEYS
