--[[
  Renews the owner record while the caller's fence is current. If the key expired (the replica
  was starved past the TTL) but nobody claimed since (the fence counter still holds the caller's
  fence), the record is re-created: the session is still the caller's.
  KEYS[1] owner hash (sg:own:{id})
  KEYS[2] fence counter (sg:fence:{id})
  ARGV[1] the caller's fence
  ARGV[2] owner TTL (ms)
  ARGV[3] replica id, ARGV[4] session id, ARGV[5] instance id (to re-create the record)
  Returns 1 renewed, 2 re-created after expiry, 0 superseded (or revoked).
]]
local current = redis.call('HGET', KEYS[1], 'fence')
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not current and redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('HSET', KEYS[1], 'replica', ARGV[3], 'session', ARGV[4], 'fence', ARGV[1], 'instance', ARGV[5])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 2
end
return 0
