--[[
  An SSH session's second step, in its sandbox's slot: lists its token digest in the sandbox's
  session index, only while the record exists and is not sealed by its delete, so the delete
  (SandboxStore.remove) finds and removes every session: no session outlives its sandbox, not even
  one minted during the delete (the session's own hash, staged by stage-ssh-session-1, is
  activated by activate-ssh-session-1 only once this step answered 1).
  The index is a sorted set scored by each session key's expiry, so it never expires before any
  of its sessions (no expiry while one of them has none), and members whose key has expired
  already (by Redis' clock, the one that expires them) are pruned on each create.
  KEYS[1] the sandbox's record (sg:sbx:{id})
  KEYS[2] the sandbox's session index (sg:sshsbx:{id})
  ARGV[1] token digest
  ARGV[2] when the session key expires (ms epoch, PEXPIREAT; 0 = never)
  Returns 1 listed, 0 the sandbox's record does not exist or is sealed by its delete
  (seal-ssh-sessions-1; nothing written).
]]
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'sshsealed') == 1 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%d', now))
if ARGV[2] ~= '0' then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], '+inf', ARGV[1])
end
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if last[2] == 'inf' or last[2] == '+inf' then
  redis.call('PERSIST', KEYS[2])
else
  redis.call('PEXPIREAT', KEYS[2], last[2])
end
return 1
