--[[
  A sandbox delete's last step, in the workspace's slot: frees the name, takes the id out of the
  workspace's sandbox set (the quota and DeleteWorkspace's check), its endpoints out of the
  workspace's listing, and drops the delete's pending entry (written first, so a delete whose
  replica died is finished by the reconcile sweep).
  KEYS[1] name index (sg:sbxname:{ws}:{name})
  KEYS[2] workspace sandbox set (sg:wssbx:{ws})
  KEYS[3] the workspace's endpoint listing (sg:svcs:{ws})
  KEYS[4] the workspace's pending hash (sg:wspend:{ws})
  ARGV[1] id, ARGV[2..] endpoint keys to unlist
  Returns 1.
]]
local id = ARGV[1]
if redis.call('GET', KEYS[1]) == id then redis.call('DEL', KEYS[1]) end
redis.call('SREM', KEYS[2], id)
for i = 2, #ARGV do redis.call('ZREM', KEYS[3], ARGV[i]) end
redis.call('HDEL', KEYS[4], id)
return 1
