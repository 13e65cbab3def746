--[[
  DeleteWorkspace (openshell-v1-more.md §10.7) in one step: marks the workspace TERMINATING
  (once: resource_version + 1, deletion time), then, unless it still holds sandboxes, removes it
  with its members and exec slots. The mark sticks when the delete is refused, as upstream's does:
  CreateSandbox and AddWorkspaceMember then refuse the workspace until a later delete succeeds.
  The caller then takes the name out of the workspace index (another slot on a cluster).
  KEYS[1] workspace hash (sg:ws:{name})
  KEYS[2] members hash (sg:wsmem:{name})
  KEYS[3] sandbox set (sg:wssbx:{name})
  KEYS[4] exec slots (sg:wsexec:{name})
  ARGV[1] now (ms)
  Returns 1 deleted, 0 no such workspace, -1 still holds sandboxes (left TERMINATING).
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[1], 'phase') ~= 'terminating' then
  redis.call('HSET', KEYS[1], 'phase', 'terminating', 'deleted', ARGV[1])
  redis.call('HINCRBY', KEYS[1], 'rv', 1)
end
if redis.call('SCARD', KEYS[3]) > 0 then return -1 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return 1
