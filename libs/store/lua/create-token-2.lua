-- Stores a new API token under its digest and indexes it by id.
-- KEYS[1] sg:tok:{digest}   KEYS[2] sg:toks
-- ARGV[1] id  ARGV[2] digest  ARGV[3] name  ARGV[4] workspace  ARGV[5] role  ARGV[6] created ms  ARGV[7] expires ms (0 = never)
-- Returns 1, or 0 if the digest or the id is already taken (a collision: the caller retries).
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'name', ARGV[3], 'ws', ARGV[4], 'role', ARGV[5], 'created', ARGV[6], 'exp', ARGV[7])
if tonumber(ARGV[7]) > 0 then redis.call('PEXPIREAT', KEYS[1], ARGV[7]) end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
