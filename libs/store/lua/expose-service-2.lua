--[[
  ExposeService's upsert (openshell-v1-more.md §7.3), in the sandbox's slot, after list-service-2:
  creates the endpoint `key` of a sandbox, or replaces it if its resource_version is still the one
  the caller read (compare-and-set). Only while the sandbox record exists, so an endpoint never
  outlives its sandbox (remove-sandbox-record-n deletes them in the same call as the record).
  KEYS[1] sandbox record (sg:sbx:{id})
  KEYS[2] the sandbox's endpoints (sg:svc:{id}): `pb:<key>` encoded ServiceEndpoint, `rv:<key>`
  ARGV[1] endpoint key, ARGV[2] resource_version read (0: create; the key must be absent)
  ARGV[3] encoded ServiceEndpoint carrying the new resource_version
  Returns the new resource_version (>= 1); -1 sandbox gone, -2 created meanwhile by another call,
  -3 changed or deleted meanwhile.
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local expected = tonumber(ARGV[2])
local current = redis.call('HGET', KEYS[2], 'rv:' .. ARGV[1])
if expected == 0 then
  if current then return -2 end
elseif tonumber(current) ~= expected then
  return -3
end
local rv = expected + 1
redis.call('HSET', KEYS[2], 'pb:' .. ARGV[1], ARGV[3], 'rv:' .. ARGV[1], rv)
return rv
