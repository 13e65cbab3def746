--[[
  DEBUG ONLY (debug break "fencing"): release-1 without the fence check.
  KEYS[1] owner hash (sg:own:{id})
  ARGV[1] the caller's fence (unused)
  Returns 1 (released).
]]
redis.call('DEL', KEYS[1])
return 1
