--[[
  Creates a sandbox record unless its name is taken, its workspace is missing or being deleted,
  or the workspace is at its sandbox quota; appends the first snapshot to its event stream and
  adds the id to the workspace's sandbox set in the same call, so the quota and DeleteWorkspace's
  "still contains sandboxes" check never see a half-made sandbox.
  KEYS[1] record hash (sg:sbx:{id})
  KEYS[2] name index (sg:sbxname:{ws}:{name})
  KEYS[3] id set (sg:sbxs)
  KEYS[4] event stream (sg:events:{id})
  KEYS[5] workspace hash (sg:ws:{ws})
  KEYS[6] workspace sandbox set (sg:wssbx:{ws})
  KEYS[7] workspace index (sg:wss)
  ARGV[1] id, ARGV[2] encoded sandbox, ARGV[3] workspace, ARGV[4] name, ARGV[5] credential hash
  ARGV[6] event stream max length (approximate trim)
  ARGV[7] per-workspace sandbox quota (0 = none)
  ARGV[8] '1' if the workspace is the default one (created here if missing: it always exists)
  ARGV[9] id for that default workspace record, ARGV[10] now (ms)
  Returns 1 created, 0 name already taken, -1 workspace missing, -2 workspace terminating,
  -3 workspace at its sandbox quota.
]]
if redis.call('EXISTS', KEYS[5]) == 0 then
  if ARGV[8] ~= '1' then return -1 end
  redis.call('HSET', KEYS[5], 'id', ARGV[9], 'created', ARGV[10], 'rv', 1, 'labels', '{}', 'phase', 'active', 'deleted', 0)
  redis.call('SADD', KEYS[7], ARGV[3])
end
if redis.call('HGET', KEYS[5], 'phase') == 'terminating' then return -2 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local quota = tonumber(ARGV[7])
if quota > 0 and redis.call('SCARD', KEYS[6]) >= quota then return -3 end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'pb', ARGV[2], 'rv', 0, 'ws', ARGV[3], 'name', ARGV[4], 'cred', ARGV[5])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('SADD', KEYS[6], ARGV[1])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*', 'rv', 0, 'pb', ARGV[2])
return 1
