--[[
  Adds a membership unless the subject already has one (any role), the workspace is missing or
  TERMINATING, or it is at its member cap.
  KEYS[1] workspace hash (sg:ws:{name})
  KEYS[2] members hash (sg:wsmem:{name}): subject -> JSON {id, role, created}
  ARGV[1] subject, ARGV[2] member JSON, ARGV[3] member cap
  Returns 1 added, 0 already a member, -1 workspace missing, -2 workspace terminating, -3 at cap.
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HGET', KEYS[1], 'phase') == 'terminating' then return -2 end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
if redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[3]) then return -3 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
