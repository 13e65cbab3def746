--[[
  Creates or replaces a warm pool's definition. The generation grows whenever the template
  (image, resources, policy: ARGV[2]) changes, so members started from an older one are never
  claimed and get replaced; a change of size alone keeps it. A new template also forgets the old
  one's failed starts (note-pool-failure-1): it gets tried at once.
  The pool index (sg:pools, another slot on a cluster) is written by the caller right after
  (PoolStore.set), and after this: see forget-pool-2.
  KEYS[1] pool hash (sg:pool:{name})
  ARGV[1] pool name, ARGV[2] template (JSON), ARGV[3] size, ARGV[4] now (ms),
  ARGV[5] '1' when creates matching the template claim from it without naming it (auto), else '0'
  Returns the generation now in force.
]]
local template = redis.call('HGET', KEYS[1], 'template')
local gen = tonumber(redis.call('HGET', KEYS[1], 'gen') or '0')
if template ~= ARGV[2] then
  gen = gen + 1
  redis.call('HDEL', KEYS[1], 'fails', 'retryat', 'lasterr')
end
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('HSET', KEYS[1], 'created', ARGV[4]) end
redis.call('HSET', KEYS[1], 'template', ARGV[2], 'size', ARGV[3], 'gen', gen, 'auto', ARGV[5])
return gen
