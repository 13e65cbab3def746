--[[
  DEBUG ONLY (debug break "fencing"): renew-2 without the fence check, so the chaos suite can
  prove its invariants catch what fencing prevents. Never used in production.
  KEYS[1] owner hash (sg:own:{id})
  KEYS[2] fence counter (unused; the same keys as renew-2)
  ARGV    as renew-2 (only ARGV[2], the owner TTL in ms, is used)
  Returns 1 (renewed).
]]
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
