--[[
  Closes a sandbox's record to new SSH sessions: create-ssh-session-3 refuses a sealed record as
  it refuses a missing one. A delete that found sessions being minted while it ran
  (remove-sandbox-n answered -1) seals the record, so its next read of the session index is
  final: no script can add a session after this one ran. Never creates the record: one already
  gone stays gone.
  KEYS[1] the sandbox's record (sg:sbx:{id})
  Returns 1 sealed, 0 the record does not exist.
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'sshsealed', '1')
return 1
