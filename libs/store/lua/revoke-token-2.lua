-- Revokes an API token: deletes its record and its index entry, if the index still maps the id to
-- that digest (read just before by the caller).
-- KEYS[1] sg:tok:{digest}   KEYS[2] sg:toks
-- ARGV[1] id   ARGV[2] digest
-- Returns 1 if the token was revoked, 0 if the id was unknown (or already revoked).
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
