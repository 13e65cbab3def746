--[[
  A sandbox create's first step (SandboxStore.create; ARCHITECTURE.md, "Creates and deletes in
  steps"), and a warm-pool claim's (PoolStore.claim): in the workspace's slot, reserves the name
  and a place in the workspace's sandbox set,
  unless the name is taken, the workspace is missing or being deleted, or it is at its sandbox
  quota; and notes the create in the workspace's pending hash with Redis' time, so that the
  reconcile sweep settles a create whose replica died before it was confirmed. The steps after
  this one are fenced by that time (create-sandbox-record-2, index-sandbox-1).
  KEYS[1] workspace hash (sg:ws:{ws})
  KEYS[2] workspace sandbox set (sg:wssbx:{ws})
  KEYS[3] name index (sg:sbxname:{ws}:{name})
  KEYS[4] the workspace's pending creates and deletes (sg:wspend:{ws})
  ARGV[1] id, ARGV[2] name, ARGV[3] per-workspace sandbox quota (0 = none)
  ARGV[4] '1' if the workspace is the default one (created here if missing: it always exists)
  ARGV[5] id for that default workspace record, ARGV[6] now (ms, its creation time)
  ARGV[7] 'create', or 'claim' followed by the member's pool and name ('claim small m-1a2b'):
  the pending entry is `<op> <reserved at> <name>[ <pool> <member name>]`
  Returns {1, reserved at (ms, Redis' clock), 1 if the default workspace was created here else 0}
  reserved; {0} name already taken; {-1} workspace missing; {-2} workspace terminating;
  {-3} workspace at its sandbox quota; {-4} the id has a pending entry here already: a claim of
  a member that another claim into this workspace has reserved (a create's id is new).
]]
local made = 0
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[4] ~= '1' then return {-1} end
  redis.call('HSET', KEYS[1], 'id', ARGV[5], 'created', ARGV[6], 'rv', 1, 'labels', '{}', 'phase', 'active', 'deleted', 0)
  made = 1
end
if redis.call('HGET', KEYS[1], 'phase') == 'terminating' then return {-2} end
if redis.call('EXISTS', KEYS[3]) == 1 then return {0} end
-- The pending entry is keyed by the id: a second claim of one member would overwrite the first
-- one's, whose release then finds it changed and leaves its name reserved for good.
if redis.call('HEXISTS', KEYS[4], ARGV[1]) == 1 then return {-4} end
local quota = tonumber(ARGV[3])
if quota > 0 and redis.call('SCARD', KEYS[2]) >= quota then return {-3} end
local t = redis.call('TIME')
local at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[3], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
local op, rest = string.match(ARGV[7], '^(%S+) ?(.*)$')
local entry = op .. ' ' .. string.format('%d', at) .. ' ' .. ARGV[2]
if rest ~= '' then entry = entry .. ' ' .. rest end
redis.call('HSET', KEYS[4], ARGV[1], entry)
return {1, at, made}
