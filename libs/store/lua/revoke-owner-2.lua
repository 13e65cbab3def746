--[[
  Revocation: a new fence with no owner. Whoever held the session fails its next renewal and
  closes it, wherever it is.
  KEYS[1] owner hash (sg:own:{id})
  KEYS[2] fence counter (sg:fence:{id})
  No ARGV. Returns 1.
]]
redis.call('INCR', KEYS[2])
redis.call('DEL', KEYS[1])
return 1
