--[[
  Claims a sandbox's supervisor session with a fresh fencing token.
  KEYS[1] owner hash (sg:own:{id})
  KEYS[2] fence counter (sg:fence:{id})
  ARGV[1] replica id
  ARGV[2] session id
  ARGV[3] owner TTL (ms)
  ARGV[4] instance id
  Returns the new fence (integer).
]]
local fence = redis.call('INCR', KEYS[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'replica', ARGV[1], 'session', ARGV[2], 'fence', fence, 'instance', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return fence
