--[[
  DeleteService: removes one endpoint of a sandbox and its entry in the workspace's listing.
  KEYS[1] the sandbox's endpoints (sg:svc:{id}), KEYS[2] the workspace's endpoint listing (sg:svcs:{ws})
  ARGV[1] endpoint key
  Returns 1 deleted, 0 it was not there.
]]
local removed = redis.call('HDEL', KEYS[1], 'pb:' .. ARGV[1], 'rv:' .. ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if removed > 0 then return 1 end
return 0
