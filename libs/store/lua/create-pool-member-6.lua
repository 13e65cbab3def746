--[[
  Creates the record of a new warm-pool member, unless the pool is gone, its template changed
  (another generation) or it already has `size` members (concurrent refills never overfill it).
  Members live in the pool's own workspace (`pool:{name}`, a name no user workspace can have),
  whose sandbox set is the member set the claim takes from.
  KEYS[1] record hash (sg:sbx:{id})
  KEYS[2] name index (sg:sbxname:pool:{pool}:{name})
  KEYS[3] id set (sg:sbxs)
  KEYS[4] event stream (sg:events:{id})
  KEYS[5] member set (sg:wssbx:pool:{pool})
  KEYS[6] pool hash (sg:pool:{pool})
  ARGV[1] id, ARGV[2] encoded sandbox, ARGV[3] the pool's workspace, ARGV[4] name,
  ARGV[5] credential hash, ARGV[6] event stream max length, ARGV[7] pool name, ARGV[8] generation
  Returns 1 created, 0 the pool is full, -1 the pool is gone or of another generation.
]]
if redis.call('HGET', KEYS[6], 'gen') ~= ARGV[8] then return -1 end
if redis.call('SCARD', KEYS[5]) >= tonumber(redis.call('HGET', KEYS[6], 'size')) then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'pb', ARGV[2], 'rv', 0, 'ws', ARGV[3], 'name', ARGV[4], 'cred', ARGV[5], 'pool', ARGV[7], 'poolgen', ARGV[8])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('SADD', KEYS[5], ARGV[1])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*', 'rv', 0, 'pb', ARGV[2])
return 1
