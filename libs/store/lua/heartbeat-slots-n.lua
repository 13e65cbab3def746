--[[
  Refreshes the heartbeat of this replica's live members (execs, forwards: acquire-slot-1), on
  Redis' clock (TIME). Only members still present are refreshed: a heartbeat never resurrects a
  released or pruned one.
  KEYS    one set per member; all of one slot on a cluster (the caller groups them: groupedByTag)
  ARGV[1] key TTL (ms)
  ARGV    then the member id of each key, in order
  Returns the number of keys given.
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', now, ARGV[i + 1])
  redis.call('PEXPIRE', KEYS[i], ARGV[1])
end
return #KEYS
