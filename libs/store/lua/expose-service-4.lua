--[[
  ExposeService's upsert (openshell-v1-more.md §7.3): creates the endpoint `key` of a sandbox, or
  replaces it if its resource_version is still the one the caller read (compare-and-set). Only
  while the sandbox record exists and its workspace is not being deleted, so an endpoint never
  outlives its sandbox (remove-sandbox-n deletes them in the same call as the record).
  KEYS[1] sandbox record (sg:sbx:{id})
  KEYS[2] the sandbox's endpoints (sg:svc:{id}): `pb:<key>` encoded ServiceEndpoint, `rv:<key>`
  KEYS[3] the workspace's endpoint listing (sg:svcs:{ws}): member key, score created_at_ms
  KEYS[4] workspace hash (sg:ws:{ws})
  ARGV[1] endpoint key, ARGV[2] resource_version read (0: create; the key must be absent)
  ARGV[3] encoded ServiceEndpoint carrying the new resource_version, ARGV[4] created_at_ms
  Returns the new resource_version (>= 1); -1 sandbox gone, -2 created meanwhile by another call,
  -3 changed or deleted meanwhile, -4 workspace being deleted.
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HGET', KEYS[4], 'phase') == 'terminating' then return -4 end
local expected = tonumber(ARGV[2])
local current = redis.call('HGET', KEYS[2], 'rv:' .. ARGV[1])
if expected == 0 then
  if current then return -2 end
elseif tonumber(current) ~= expected then
  return -3
end
local rv = expected + 1
redis.call('HSET', KEYS[2], 'pb:' .. ARGV[1], ARGV[3], 'rv:' .. ARGV[1], rv)
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
return rv
