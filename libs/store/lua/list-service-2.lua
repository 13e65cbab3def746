--[[
  ExposeService's first step, in the workspace's slot: lists the endpoint key in the workspace's
  endpoint listing, unless the workspace is being deleted. The endpoint itself is written next, in
  its sandbox's slot (expose-service-3); a listed key without an endpoint (that step refused, or
  its replica died) is left out of every listing and taken out of it (ServiceEndpointStore).
  KEYS[1] workspace hash (sg:ws:{ws}), KEYS[2] the workspace's endpoint listing (sg:svcs:{ws})
  ARGV[1] endpoint key, ARGV[2] created_at_ms (the listing's order)
  Returns 1 listed, -4 workspace being deleted.
]]
if redis.call('HGET', KEYS[1], 'phase') == 'terminating' then return -4 end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
