--[[
  Refreshes the heartbeat of this replica's live execs, on Redis' clock (TIME). Only members
  still present are refreshed: a heartbeat never resurrects a released or pruned slot.
  KEYS    the exec slots set of each exec's workspace (sg:wsexec:{ws}), one per exec; all of one
          slot on a cluster (the caller groups them: groupedByTag)
  ARGV[1] key TTL (ms)
  ARGV    then the exec id of each key, in order
  Returns the number of execs given.
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', now, ARGV[i + 1])
  redis.call('PEXPIRE', KEYS[i], ARGV[1])
end
return #KEYS
