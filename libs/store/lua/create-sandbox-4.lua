--[[
  Creates a sandbox record unless its name is taken, and appends the first snapshot to its
  event stream in the same call.
  KEYS[1] record hash (sg:sbx:{id})
  KEYS[2] name index (sg:sbxname:{ws}:{name})
  KEYS[3] id set (sg:sbxs)
  KEYS[4] event stream (sg:events:{id})
  ARGV[1] id, ARGV[2] encoded sandbox, ARGV[3] workspace, ARGV[4] name, ARGV[5] credential hash
  ARGV[6] event stream max length (approximate trim)
  Returns 1 created, 0 name already taken.
]]
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'pb', ARGV[2], 'rv', 0, 'ws', ARGV[3], 'name', ARGV[4], 'cred', ARGV[5])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*', 'rv', 0, 'pb', ARGV[2])
return 1
