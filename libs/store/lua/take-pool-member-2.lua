--[[
  A warm-pool claim's last step, in the pool's slot: the claimed member leaves its pool's member
  set and frees its member name. Safe to run again (the reconcile sweep does, for a claim whose
  replica died after claim-record-2).
  KEYS[1] member set (sg:wssbx:pool:{pool}), KEYS[2] the member's name index (sg:sbxname:pool:{pool}:{name})
  ARGV[1] member id
  Returns 1.
]]
redis.call('SREM', KEYS[1], ARGV[1])
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 1
