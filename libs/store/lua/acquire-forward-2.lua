--[[
  Admits one more live ForwardTcp on a token and a sandbox unless either is at its cap. Scores
  are heartbeat times from Redis' own clock (TIME), so replicas with skewed clocks agree on
  what is stale.
  KEYS[1] forwards by token (sg:sshfwd:tok:{sha256(token)})
  KEYS[2] forwards by sandbox (sg:sshfwd:sbx:{id})
  ARGV[1] forward id
  ARGV[2] per-token cap
  ARGV[3] per-sandbox cap
  ARGV[4] staleness (ms): members not refreshed for this long are pruned and not counted
  ARGV[5] key TTL (ms)
  Returns 0 admitted, 1 token at its cap, 2 sandbox at its cap.
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local staleBefore = now - tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', staleBefore)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', staleBefore)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 1 end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 2 end
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 0
