--[[
  An SSH session's last step, in its token's slot: the staged session (stage-ssh-session-1) is
  no longer pending and gets its real expiry, unless it is gone meanwhile (its sandbox's delete
  removed it, or it expired: the steps took longer than a pending session lives).
  KEYS[1] session hash (sg:ssh:{sha256(token)})
  ARGV[1] when the session key expires (ms epoch, PEXPIREAT; 0 = never)
  Returns 1 active, 0 gone (nothing written).
]]
if redis.call('HEXISTS', KEYS[1], 'pending') == 0 then return 0 end
redis.call('HDEL', KEYS[1], 'pending')
if ARGV[1] ~= '0' then
  redis.call('PEXPIREAT', KEYS[1], ARGV[1])
else
  redis.call('PERSIST', KEYS[1])
end
return 1
