--[[
  Creates a workspace unless one of that name exists (TERMINATING ones too). The caller lists it
  in the workspace index afterwards (another slot on a cluster: WorkspaceStore.create), never
  before, so a listing's name without its hash is one whose delete is done (and may be dropped).
  KEYS[1] workspace hash (sg:ws:{name})
  ARGV[1] id, ARGV[2] created (ms), ARGV[3] labels (JSON object)
  Returns 1 created, 0 already exists.
]]
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'created', ARGV[2], 'rv', 1, 'labels', ARGV[3], 'phase', 'active', 'deleted', 0)
return 1
