--[[
  A sandbox create's second step, in the sandbox's slot: writes the record and the first snapshot
  of its event stream, only within `window` ms of the reservation (reserve-sandbox-4, by Redis'
  clock), so that a replica frozen past that cannot write a record after the reconcile sweep
  released its reservation (the sweep waits far longer than the window).
  KEYS[1] record hash (sg:sbx:{id})
  KEYS[2] event stream (sg:events:{id})
  ARGV[1] encoded sandbox, ARGV[2] workspace, ARGV[3] name, ARGV[4] credential hash
  ARGV[5] event stream max length (approximate trim)
  ARGV[6] reserved at (ms), ARGV[7] window (ms)
  ARGV[8..] more record fields, as field, value pairs (a pool member's `pool`, `poolgen`)
  Returns 1 written, 0 a record of that id exists already (nothing written), -1 too late.
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > tonumber(ARGV[6]) + tonumber(ARGV[7]) then return -1 end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'pb', ARGV[1], 'rv', 0, 'ws', ARGV[2], 'name', ARGV[3], 'cred', ARGV[4])
for i = 8, #ARGV - 1, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*', 'rv', 0, 'pb', ARGV[1])
return 1
