--[[
  A sandbox delete's main step (SandboxStore.remove), in the sandbox's slot: removes the record
  and everything keyed by the sandbox. The event stream gets a final 'deleted' entry and then
  expires: watchers see the end, and nothing of the sandbox stays for long. Its SSH sessions' own
  keys (in their tokens' slots) were deleted by the step before, after the record was sealed
  (seal-ssh-sessions-1), so the session index read then was final; if it names a digest the
  caller did not pass anyway, nothing is done and -1 answered (the caller reads it again).
  KEYS[1] record hash, KEYS[2] owner hash, KEYS[3] fence counter, KEYS[4] event stream,
  KEYS[5] log stream, KEYS[6] usage hash, KEYS[7] the sandbox's endpoints (sg:svc:{id}),
  KEYS[8] forwards to the sandbox (sg:sshfwd:sbx:{id}), KEYS[9] SSH session index (sg:sshsbx:{id})
  ARGV[1] how long the event stream lingers after the delete (ms)
  ARGV[2] event stream max length (approximate trim)
  ARGV[3..] the token digests whose sessions the caller deleted
  Returns {1 the record existed / 0 it did not, then the keys of its exposed-service endpoints
  (for the workspace's listing, unindex-sandbox-4)}, or {-1} the session index changed.
]]
local passed = {}
for i = 3, #ARGV do passed[ARGV[i]] = true end
for _, digest in ipairs(redis.call('ZRANGE', KEYS[9], 0, -1)) do
  if not passed[digest] then return {-1} end
end
local existed = redis.call('EXISTS', KEYS[1])
local out = {existed}
for _, field in ipairs(redis.call('HKEYS', KEYS[7])) do
  if string.sub(field, 1, 3) == 'pb:' then out[#out + 1] = string.sub(field, 4) end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9])
if existed == 1 then
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[2], '*', 'deleted', 1)
  redis.call('PEXPIRE', KEYS[4], ARGV[1])
end
return out
