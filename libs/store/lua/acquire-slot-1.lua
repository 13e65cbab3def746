--[[
  Admits one more live member (an exec of a workspace, a ForwardTcp on a token or into a sandbox)
  into its set unless the set is at its cap, across replicas. Scores are heartbeat times from
  Redis' own clock (TIME), so replicas with skewed clocks agree on what is stale; members of a
  replica that crashed stop being refreshed (heartbeat-slots-n) and are pruned here.
  KEYS[1] the set: exec slots of a workspace (sg:wsexec:{ws}), forwards by token
          (sg:sshfwd:tok:{sha256(token)}) or by sandbox (sg:sshfwd:sbx:{id})
  ARGV[1] member id, ARGV[2] cap, ARGV[3] staleness (ms), ARGV[4] key TTL (ms)
  Returns 1 admitted, 0 at the cap (nothing written).
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
