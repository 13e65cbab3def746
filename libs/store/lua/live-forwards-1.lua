--[[
  Counts the live (not stale) forwards in one forwards set, on Redis' clock (TIME).
  KEYS[1] forwards by sandbox (sg:sshfwd:sbx:{id}) or by token
  ARGV[1] staleness (ms)
  Returns the count.
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], now - tonumber(ARGV[1]), '+inf')
