--[[
  Compare-and-swap write of a sandbox record on its resource_version; a change of the public
  resource is appended to the event stream in the same call.
  KEYS[1] record hash (sg:sbx:{id})
  KEYS[2] event stream (sg:events:{id})
  ARGV[1] the resource_version the caller read
  ARGV[2] encoded sandbox
  ARGV[3] '1' if the public resource changed (append an event), else '0'
  ARGV[4] event stream max length (approximate trim)
  ARGV[5..] internal hash fields to set, as field, value pairs
  Returns the new resource_version (>= 0), -1 the record is gone, -2 version conflict.
]]
local rv = redis.call('HGET', KEYS[1], 'rv')
if not rv then return -1 end
if tonumber(rv) ~= tonumber(ARGV[1]) then return -2 end
local next = tonumber(rv) + 1
redis.call('HSET', KEYS[1], 'pb', ARGV[2], 'rv', next)
for i = 5, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
if ARGV[3] == '1' then redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'rv', next, 'pb', ARGV[2]) end
return next
