--[[
  Deletes a warm pool's definition. Its name stays in the index until the pool-refill job has
  retired every member (forget-pool-3), so a lost refill is found again by the sweep.
  KEYS[1] pool hash (sg:pool:{name})
  KEYS[2] pool index (sg:pools), unused: declared so the script's keys are the pool's
  ARGV[1] pool name
  Returns 1 deleted, 0 there was no such pool.
]]
return redis.call('DEL', KEYS[1])
