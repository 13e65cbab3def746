--[[
  A warm-pool member whose record is gone while its id is still in the pool's member set: on a
  Redis Cluster the record and the set live on different shards, so a failover of the record's
  shard loses a member's record (unacknowledged: a refill wrote it) and keeps its place. Counted
  in the pool's size, such a place would never be refilled. The caller saw no pending entry and
  then no record (PoolStore.membership); a create or delete of the id that is still in its steps
  has a pending entry, so this looks again and leaves such an id alone.
  KEYS[1] member set (sg:wssbx:pool:{pool})
  KEYS[2] the member's name index (sg:sbxname:pool:{pool}:{name})
  KEYS[3] the pool workspace's pending creates and deletes (sg:wspend:pool:{pool})
  ARGV[1] id
  Returns 1 dropped, 0 left (pending, or no longer in the set).
]]
local id = ARGV[1]
if redis.call('HEXISTS', KEYS[3], id) == 1 then return 0 end
if redis.call('SREM', KEYS[1], id) == 0 then return 0 end
if redis.call('GET', KEYS[2]) == id then redis.call('DEL', KEYS[2]) end
return 1
