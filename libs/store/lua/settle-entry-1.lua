--[[
  Ends a pending create or claim whose steps are all done (the creator's last step, or the
  reconcile sweep's when the creator died after writing the record): drops its pending entry,
  only if it is still the one read (a delete's entry that replaced it stays).
  KEYS[1] the workspace's pending hash (sg:wspend:{ws})
  ARGV[1] id, ARGV[2] the pending entry as written or read
  Returns 1 settled, 0 the entry changed or is gone.
]]
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
