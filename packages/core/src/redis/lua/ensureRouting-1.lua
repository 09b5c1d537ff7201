--[[
  ensureRouting-1: writes a shard's routing marker (includes/routing.lua) unless it already holds
  the same or a newer resize. Idempotent, so CoordinatorAdmin.resizeShards writes it for every
  shard after the resize and the cutover check re-ensures it before it trusts a drain.

  KEYS[1]  the shard's routing marker
  ARGV[1]  the resize's metadataVersion   ARGV[2] shard count from switchAt on
  ARGV[3]  shard count before switchAt      ARGV[4] switchAt (Redis ms)
  Output: 1 when written, 0 when a marker of this or a newer resize was there.
]]
local version = tonumber(ARGV[1])
local stored = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if stored >= version then return 0 end
redis.call('HSET', KEYS[1], 'version', version, 'count', ARGV[2], 'previous', ARGV[3], 'switchAt', ARGV[4])
return 1
