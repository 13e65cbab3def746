--[[
  Claims one warm-pool member for a create: atomically it leaves the pool (never claimed twice)
  and becomes the caller's sandbox, under the workspace rules of create-sandbox-7 (the workspace
  exists and is not being deleted, the name is free, the quota holds). The record must still be
  the version the caller read (a Ready member of the pool's current generation), else nothing
  is written and the caller tries another member. `mainpending` stays 1 until the supervisor
  confirms starting the claim's main process (reconcile re-sends start_main until then);
  `claimed` stays for good: every later run is launched as the member was (start_main then).
  KEYS[1] member record (sg:sbx:{id})
  KEYS[2] member set (sg:wssbx:pool:{pool})
  KEYS[3] the member's name index (sg:sbxname:pool:{pool}:{member name})
  KEYS[4] the new name index (sg:sbxname:{ws}:{name})
  KEYS[5] event stream (sg:events:{id})
  KEYS[6] workspace hash (sg:ws:{ws})
  KEYS[7] workspace sandbox set (sg:wssbx:{ws})
  KEYS[8] workspace index (sg:wss)
  KEYS[9] pool hash (sg:pool:{pool})
  ARGV[1] id, ARGV[2] the resource_version read, ARGV[3] the pool generation read,
  ARGV[4] encoded sandbox as claimed, ARGV[5] workspace, ARGV[6] name,
  ARGV[7] event stream max length, ARGV[8] per-workspace sandbox quota (0 = none),
  ARGV[9] '1' if the workspace is the default one, ARGV[10] id for that default workspace record,
  ARGV[11] now (ms)
  Returns 1 claimed, -4 the member is no longer claimable (taken, changed, pool regenerated),
  and create-sandbox-7's answers: 0 name taken, -1 workspace missing, -2 terminating, -3 quota.
]]
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 0 then return -4 end
local rv = redis.call('HGET', KEYS[1], 'rv')
if not rv or tonumber(rv) ~= tonumber(ARGV[2]) then return -4 end
if redis.call('HGET', KEYS[9], 'gen') ~= ARGV[3] or redis.call('HGET', KEYS[1], 'poolgen') ~= ARGV[3] then return -4 end
if redis.call('EXISTS', KEYS[6]) == 0 then
  if ARGV[9] ~= '1' then return -1 end
  redis.call('HSET', KEYS[6], 'id', ARGV[10], 'created', ARGV[11], 'rv', 1, 'labels', '{}', 'phase', 'active', 'deleted', 0)
  redis.call('SADD', KEYS[8], ARGV[5])
end
if redis.call('HGET', KEYS[6], 'phase') == 'terminating' then return -2 end
if redis.call('EXISTS', KEYS[4]) == 1 then return 0 end
local quota = tonumber(ARGV[8])
if quota > 0 and redis.call('SCARD', KEYS[7]) >= quota then return -3 end
local next = tonumber(rv) + 1
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
redis.call('SET', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[1], 'pool', 'poolgen')
redis.call('HSET', KEYS[1], 'pb', ARGV[4], 'rv', next, 'ws', ARGV[5], 'name', ARGV[6], 'mainpending', 1, 'claimed', 1)
redis.call('SADD', KEYS[7], ARGV[1])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[7], '*', 'rv', next, 'pb', ARGV[4])
return 1
