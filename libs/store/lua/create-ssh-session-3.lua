--[[
  Stores one SSH session, only while its sandbox's record exists, and lists its token digest in
  the sandbox's session index, so the sandbox's delete (remove-sandbox-n) removes the session
  with the record: no session outlives its sandbox, not even one minted during the delete.
  The index is a sorted set scored by each session key's expiry, so it never expires before any
  of its sessions (no expiry while one of them has none), and members whose key has expired
  already (by Redis' clock, the one that expires them) are pruned on each create.
  KEYS[1] session hash (sg:ssh:{sha256(token)})
  KEYS[2] the sandbox's record (sg:sbx:{id})
  KEYS[3] the sandbox's session index (sg:sshsbx:{id})
  ARGV[1] token digest, ARGV[2] sandbox id, ARGV[3] run (runStartedAtMs), ARGV[4] expires_at_ms
  (0 = never), ARGV[5] revoked '1'/'0', ARGV[6] created (ms)
  ARGV[7] when the session key expires (ms epoch, PEXPIREAT; 0 = never)
  Returns 1 stored, 0 the sandbox's record does not exist or is sealed by its delete
  (seal-ssh-sessions-1; nothing written).
]]
if redis.call('EXISTS', KEYS[2]) == 0 or redis.call('HEXISTS', KEYS[2], 'sshsealed') == 1 then return 0 end
redis.call('HSET', KEYS[1], 'sbx', ARGV[2], 'run', ARGV[3], 'exp', ARGV[4], 'rev', ARGV[5], 'created', ARGV[6])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. string.format('%d', now))
if ARGV[7] ~= '0' then
  redis.call('PEXPIREAT', KEYS[1], ARGV[7])
  redis.call('ZADD', KEYS[3], ARGV[7], ARGV[1])
else
  redis.call('ZADD', KEYS[3], '+inf', ARGV[1])
end
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
if last[2] == 'inf' or last[2] == '+inf' then
  redis.call('PERSIST', KEYS[3])
else
  redis.call('PEXPIREAT', KEYS[3], last[2])
end
return 1
