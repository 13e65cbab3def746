--[[
  Creates a workspace unless one of that name exists (TERMINATING ones too).
  KEYS[1] workspace hash (sg:ws:{name})
  KEYS[2] workspace index (sg:wss)
  ARGV[1] name, ARGV[2] id, ARGV[3] created (ms), ARGV[4] labels (JSON object)
  Returns 1 created, 0 already exists.
]]
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'id', ARGV[2], 'created', ARGV[3], 'rv', 1, 'labels', ARGV[4], 'phase', 'active', 'deleted', 0)
redis.call('SADD', KEYS[2], ARGV[1])
return 1
