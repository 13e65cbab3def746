--[[
  Refreshes the heartbeat of live forwards, on Redis' clock (TIME). Only members still present
  are refreshed: a heartbeat never resurrects a released or pruned forward.
  KEYS    pairs per forward: forwards by token, forwards by sandbox
  ARGV[1] key TTL (ms)
  ARGV    then the forward id of each pair, in order
  Returns the number of forwards given.
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = math.floor(#KEYS / 2)
for i = 1, n do
  for _, key in ipairs({ KEYS[2 * i - 1], KEYS[2 * i] }) do
    redis.call('ZADD', key, 'XX', now, ARGV[i + 1])
    redis.call('PEXPIRE', key, ARGV[1])
  end
end
return n
