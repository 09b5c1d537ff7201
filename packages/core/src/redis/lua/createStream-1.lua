--[[
  createStream-1: creates the shard metadata of a stream prefix; idempotent for the same shard count.

  KEYS[1]  the stream's metadata hash
  ARGV[1]  shardCount
  Output: { errorCode, message, created (0/1), metadata (flat HGETALL) }
]]
--- @include "includes/errorCodes"
--- @include "includes/time"
--- @include "includes/shardLists"

local shardCount = tonumber(ARGV[1])
local existing = redis.call('HGET', KEYS[1], 'shardCount')
if existing then
  if tonumber(existing) ~= shardCount then
    return { ERR_SHARD_COUNT_CONFLICT, 'the stream already has ' .. existing .. ' shards, not ' .. shardCount
      .. '; change it with CoordinatorAdmin.resizeShards', 0, {} }
  end
  return { ERR_NONE, '', 0, redis.call('HGETALL', KEYS[1]) }
end
local now = nowMs()
local all = rangeCsv(shardCount)
redis.call('HSET', KEYS[1], 'shardCount', shardCount, 'metadataVersion', 1, 'readableShardSet', all,
  'writableShardSet', all, 'readableIsFullRange', 1, 'createdAt', now, 'updatedAt', now)
return { ERR_NONE, '', 1, redis.call('HGETALL', KEYS[1]) }
