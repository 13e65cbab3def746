--[[
  Records that starting members of a pool's current template failed (a launch refused, or members
  found in Error by the refill). The refill starts no member before `retryat`, a delay that
  doubles with each consecutive failure up to a cap, so a pool whose image cannot run does not
  boot and delete members on every sweep. A failure of an older generation is stale: SetPool
  with a new template starts afresh.
  One failure per round: refills can run side by side (a claim's, the sweep's, another worker's),
  and each that launched members for the same round would count it again, so the wait would
  double too soon. The caller says how many failures it read before it launched; when that is no
  longer the count, a refill beside it has recorded this round already.
  KEYS[1] pool hash (sg:pool:{name})
  ARGV[1] generation the failed members were started for, ARGV[2] now (ms), ARGV[3] first delay
  (ms), ARGV[4] longest delay (ms), ARGV[5] what failed (for ListPools), ARGV[6] the failure count
  the caller read before its launches
  Returns the delay (ms) before the next start, -1 when the pool is gone or of another generation,
  -2 when this round's failure was recorded already.
]]
if redis.call('HGET', KEYS[1], 'gen') ~= ARGV[1] then return -1 end
if tonumber(redis.call('HGET', KEYS[1], 'fails') or '0') ~= tonumber(ARGV[6]) then return -2 end
local fails = redis.call('HINCRBY', KEYS[1], 'fails', 1)
local delay = tonumber(ARGV[3])
local longest = tonumber(ARGV[4])
for _ = 2, fails do
  delay = delay * 2
  if delay >= longest then break end
end
if delay > longest then delay = longest end
redis.call('HSET', KEYS[1], 'retryat', tonumber(ARGV[2]) + delay, 'lasterr', ARGV[5])
return delay
