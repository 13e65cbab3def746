--[[
  A warm-pool member's first step (PoolStore.createMember), as reserve-sandbox-4 is a create's:
  reserves the member's name and place in its pool's member set (the sandbox set of the pool's
  workspace) unless the pool is gone, its template changed (another generation) or it already
  has `size` members (concurrent refills never overfill it), and notes the create as pending.
  KEYS[1] pool hash (sg:pool:{pool}), in the pool's workspace's slot
  KEYS[2] member set (sg:wssbx:pool:{pool})
  KEYS[3] name index (sg:sbxname:pool:{pool}:{name})
  KEYS[4] the pool workspace's pending creates and deletes (sg:wspend:pool:{pool})
  ARGV[1] id, ARGV[2] name, ARGV[3] generation
  Returns {1, reserved at (ms, Redis' clock)} reserved; {0} the pool is full; {-1} the pool is
  gone or of another generation; {-2} the name is taken.
]]
if redis.call('HGET', KEYS[1], 'gen') ~= ARGV[3] then return {-1} end
if redis.call('SCARD', KEYS[2]) >= tonumber(redis.call('HGET', KEYS[1], 'size')) then return {0} end
if redis.call('EXISTS', KEYS[3]) == 1 then return {-2} end
local t = redis.call('TIME')
local at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[3], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], 'create ' .. string.format('%d', at) .. ' ' .. ARGV[2])
return {1, at}
