--[[
  Closes a sandbox's record to new SSH sessions: list-ssh-session-2 refuses a sealed record as
  it refuses a missing one. A delete (SandboxStore.remove) seals the record before it reads the
  session index, so that read is final: no script can add a session after this one ran. Never creates the record: one already
  gone stays gone.
  KEYS[1] the sandbox's record (sg:sbx:{id})
  Returns 1 sealed, 0 the record does not exist.
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'sshsealed', '1')
return 1
