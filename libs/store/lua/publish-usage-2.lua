--[[
  Publishes one sandbox's usage sample, only while its record exists: a sample read just before a
  delete must not bring the usage key back after remove-sandbox-record-n removed it.
  KEYS[1] record hash (sg:sbx:{id}), KEYS[2] usage hash (sg:usage:{id})
  ARGV[1] cpu seconds, ARGV[2] memory bytes, ARGV[3] sampled at (ms), ARGV[4] replica id,
  ARGV[5] ttl (ms)
  Returns 1 written, 0 the record is gone (nothing written).
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], 'cpu', ARGV[1], 'mem', ARGV[2], 'at', ARGV[3], 'replica', ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1
