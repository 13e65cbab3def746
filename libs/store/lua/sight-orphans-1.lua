--[[
  One reconcile sweep's sighting of orphaned compute (compute whose record it did not find):
  every id is kept with the time it was first seen; ids not sighted this time (their compute went,
  or their record came back) are forgotten.
  KEYS[1] sorted set of quarantined orphans (sg:orphans): member = sandbox id, score = first seen ms
  ARGV[1] now (ms), ARGV[2..] the ids sighted
  Returns the first-seen time of each sighted id, in ARGV order (strings).
]]
local sighted = {}
for i = 2, #ARGV do sighted[ARGV[i]] = true end
local known = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, id in ipairs(known) do
  if not sighted[id] then redis.call('ZREM', KEYS[1], id) end
end
local firstSeen = {}
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'NX', ARGV[1], ARGV[i])
  firstSeen[#firstSeen + 1] = redis.call('ZSCORE', KEYS[1], ARGV[i])
end
return firstSeen
