--[[
  A warm-pool claim's main step, in the member's slot: atomically the member record becomes the
  caller's sandbox, if it is still the version the caller read and still an unclaimed member of
  that generation (so it is never claimed twice: the first claim bumps the resource_version),
  and only within `window` ms of the claim's reservation (reserve-sandbox-4), as
  create-sandbox-record-2. `mainpending` stays 1 until the supervisor confirms starting the
  claim's main process (reconcile re-sends start_main until then); `claimed` stays for good:
  every later run is launched as the member was (start_main then).
  KEYS[1] member record (sg:sbx:{id}), KEYS[2] event stream (sg:events:{id})
  ARGV[1] the resource_version read, ARGV[2] the pool generation read,
  ARGV[3] encoded sandbox as claimed, ARGV[4] workspace, ARGV[5] name,
  ARGV[6] event stream max length, ARGV[7] reserved at (ms), ARGV[8] window (ms)
  Returns 1 claimed, -4 the member is no longer claimable (taken, changed, gone), -1 too late.
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > tonumber(ARGV[7]) + tonumber(ARGV[8]) then return -1 end
local rv = redis.call('HGET', KEYS[1], 'rv')
if not rv or tonumber(rv) ~= tonumber(ARGV[1]) then return -4 end
if not redis.call('HGET', KEYS[1], 'pool') or redis.call('HGET', KEYS[1], 'poolgen') ~= ARGV[2] then return -4 end
local next = tonumber(rv) + 1
redis.call('HDEL', KEYS[1], 'pool', 'poolgen')
redis.call('HSET', KEYS[1], 'pb', ARGV[3], 'rv', next, 'ws', ARGV[4], 'name', ARGV[5], 'mainpending', 1, 'claimed', 1)
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '*', 'rv', next, 'pb', ARGV[3])
return 1
