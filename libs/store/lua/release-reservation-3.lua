--[[
  Undoes a create's reservation (reserve-sandbox-4, reserve-pool-member-4): its
  creator failed after it, or the reconcile sweep found it unconfirmed past its grace and without
  a record. Only the very reservation read (its pending entry unchanged): a later delete's or
  claim's entry is left alone.
  KEYS[1] the workspace's pending hash (sg:wspend:{ws})
  KEYS[2] name index (sg:sbxname:{ws}:{name})
  KEYS[3] workspace sandbox set (sg:wssbx:{ws})
  ARGV[1] id, ARGV[2] the pending entry as read
  Returns 1 released, 0 the entry changed or is gone (nothing done).
]]
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
