--[[
  Admits one more live ForwardTcp into one of its two counts (the token's, the sandbox's: two
  slots on a cluster, so two calls; SshSessionStore.acquireForward) unless it is at its cap.
  Scores are heartbeat times from Redis' own clock (TIME), so replicas with skewed clocks agree
  on what is stale.
  KEYS[1] forwards by token (sg:sshfwd:tok:{sha256(token)}) or by sandbox (sg:sshfwd:sbx:{id})
  ARGV[1] forward id, ARGV[2] cap
  ARGV[3] staleness (ms): members not refreshed for this long are pruned and not counted
  ARGV[4] key TTL (ms)
  Returns 0 admitted, 1 at its cap (nothing written).
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 1 end
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 0
