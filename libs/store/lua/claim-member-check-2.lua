--[[
  A warm-pool claim's check, in the pool's slot: the member is still in its pool's member set
  and of the pool's current generation (a member started from an older template is never
  claimed). The claim itself is claim-record-2's compare-and-set on the member's record.
  KEYS[1] pool hash (sg:pool:{pool}), KEYS[2] member set (sg:wssbx:pool:{pool})
  ARGV[1] member id, ARGV[2] the generation read
  Returns 1 claimable, 0 not.
]]
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[1], 'gen') ~= ARGV[2] then return 0 end
return 1
