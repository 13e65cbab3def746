--[[
  A member of the pool's current template got Ready: its failures are over, and the refill starts
  members again without waiting.
  KEYS[1] pool hash (sg:pool:{name})
  ARGV[1] generation of the member that got Ready
  Returns 1 when failures were cleared, 0 when there were none (or the pool moved on).
]]
if redis.call('HGET', KEYS[1], 'gen') ~= ARGV[1] then return 0 end
return redis.call('HDEL', KEYS[1], 'fails', 'retryat', 'lasterr') > 0 and 1 or 0
