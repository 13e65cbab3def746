--[[
  Removes a sandbox record and everything keyed by it, and its id from its workspace's sandbox
  set (the quota and DeleteWorkspace's check stay exact). The event stream gets a final
  'deleted' entry and then expires: watchers see the end, and nothing of the sandbox stays for long.
  Its exposed-service endpoints go with it (openshell-v1-more.md §7.2), out of the workspace's
  endpoint listing too, in the same call: no endpoint outlives its sandbox, even for a moment.
  So do its SSH sessions (every token minted for it, revoked or not, expired or not) and the
  forward counts on them and on the sandbox. The caller passes the keys of every session it read
  from the sandbox's session index; if the index names one it was not given (created between that
  read and this call: create-ssh-session-3 adds to the index only while the record exists), the
  script changes nothing and answers -1, and the caller reads the index again. It never builds a
  key name itself, so every key it touches is declared (as Redis Cluster requires).
  KEYS[1] record hash, KEYS[2] name index, KEYS[3] id set, KEYS[4] owner hash,
  KEYS[5] fence counter, KEYS[6] event stream, KEYS[7] log stream,
  KEYS[8] workspace sandbox set (sg:wssbx:{ws}), KEYS[9] usage hash (sg:usage:{id}),
  KEYS[10] the sandbox's endpoints (sg:svc:{id}), KEYS[11] the workspace's endpoint listing (sg:svcs:{ws}),
  KEYS[12] forwards to the sandbox (sg:sshfwd:sbx:{id}), KEYS[13] the sandbox's SSH session index (sg:sshsbx:{id}),
  KEYS[14..] a pair per session: session hash (sg:ssh:{digest}), forwards on its token (sg:sshfwd:tok:{digest})
  ARGV[1] id
  ARGV[2] how long the event stream lingers after the delete (ms)
  ARGV[3] event stream max length (approximate trim)
  ARGV[4..] the token digest of each session pair, in the same order
  Returns 1 the record existed (removed), 0 it did not, -1 the session index changed (nothing done).
]]
local passed = {}
for i = 4, #ARGV do passed[ARGV[i]] = true end
for _, digest in ipairs(redis.call('ZRANGE', KEYS[13], 0, -1)) do
  if not passed[digest] then return -1 end
end
local existed = redis.call('EXISTS', KEYS[1])
local id = ARGV[1]
if redis.call('GET', KEYS[2]) == id then redis.call('DEL', KEYS[2]) end
for _, field in ipairs(redis.call('HKEYS', KEYS[10])) do
  if string.sub(field, 1, 3) == 'pb:' then redis.call('ZREM', KEYS[11], string.sub(field, 4)) end
end
redis.call('DEL', KEYS[1], KEYS[4], KEYS[5], KEYS[7], KEYS[9], KEYS[10], KEYS[12], KEYS[13])
for i = 14, #KEYS do redis.call('DEL', KEYS[i]) end
redis.call('SREM', KEYS[3], id)
redis.call('SREM', KEYS[8], id)
if existed == 1 then
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[3], '*', 'deleted', 1)
  redis.call('PEXPIRE', KEYS[6], ARGV[2])
end
return existed
