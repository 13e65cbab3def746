--[[
  An SSH session's first step (SshSessionStore.create), in its token's slot: the session's hash,
  marked pending and expiring in `ARGV[6]` ms, so that a session whose later steps never ran (its
  replica died, or its sandbox's record was gone) vanishes on its own. A pending session grants
  nothing (SshSessionStore.get).
  KEYS[1] session hash (sg:ssh:{sha256(token)})
  ARGV[1] sandbox id, ARGV[2] run (runStartedAtMs), ARGV[3] expires_at_ms (0 = never),
  ARGV[4] revoked '1'/'0', ARGV[5] created (ms), ARGV[6] how long a pending session lives (ms)
  Returns 1.
]]
redis.call('HSET', KEYS[1], 'sbx', ARGV[1], 'run', ARGV[2], 'exp', ARGV[3], 'rev', ARGV[4], 'created', ARGV[5], 'pending', '1')
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
