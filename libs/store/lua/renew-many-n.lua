--[[
  renew-2 for many sessions in one call (a replica renews all of its sessions per tick).
  KEYS    pairs: owner hash, fence counter of session 1, then of session 2, ...
  ARGV[1] owner TTL (ms)
  ARGV    then four per session: fence, replica id, session id, instance id
  Returns an array with one result per session: 1 renewed, 2 re-created, 0 superseded.
]]
local out = {}
for i = 1, #KEYS / 2 do
  local owner, fenceKey = KEYS[2 * i - 1], KEYS[2 * i]
  local base = 2 + (i - 1) * 4
  local fence = ARGV[base]
  local current = redis.call('HGET', owner, 'fence')
  if current == fence then
    redis.call('PEXPIRE', owner, ARGV[1])
    out[i] = 1
  elseif not current and redis.call('GET', fenceKey) == fence then
    redis.call('HSET', owner, 'replica', ARGV[base + 1], 'session', ARGV[base + 2], 'fence', fence, 'instance', ARGV[base + 3])
    redis.call('PEXPIRE', owner, ARGV[1])
    out[i] = 2
  else
    out[i] = 0
  end
end
return out
