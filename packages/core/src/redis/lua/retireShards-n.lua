--[[
  retireShards-n: the first step of CoordinatorAdmin.deleteDrainedShards, after a shrink has
  drained everywhere: the removed shards leave the stream's span (no group reads them, no group
  created from now on will) and are recorded as retiring (`retiringSpan`, `retiredVersion`) until
  each one's keys are deleted in its own slot (deleteRetiredShard-n.lua) and the record is ended
  (endShardRetirement-1.lua). Refused while any group still reads or owns one of them. While the
  record stands, resizeShards-n.lua refuses to resize: a resize back must not grow into a shard
  that is being deleted (CoordinatorAdmin.resizeShards finishes the deletion first).

  KEYS[1]  the stream's metadata hash           KEYS[2]  the prefix's set of consumer groups
  KEYS[3..] per group, in the order of ARGV[2..]: its metadata hash, then its owners hash
  ARGV[1] number of groups G    ARGV[2..1+G] group names

  Output: { errorCode, message, first retiring shard, end (exclusive), retiredVersion }, or
  { 'RETRY' } when the set of groups is not the one the caller passed. A call after one that
  stopped before its deletes finished answers the shards still recorded as retiring, so that
  calling deleteDrainedShards again finishes the job (SPEC 10.5).
]]
--- @include "includes/errorCodes"

local groupCount = tonumber(ARGV[1])
local meta = redis.call('HMGET', KEYS[1], 'shardCount', 'shardSpan', 'retiringSpan', 'retiredVersion', 'metadataVersion')
if not meta[1] then
  return { ERR_GROUP_NOT_FOUND, 'the stream prefix has no metadata: create it with CoordinatorAdmin.createStream', 0, 0, 0 }
end
if redis.call('SCARD', KEYS[2]) ~= groupCount then return { 'RETRY' } end
for i = 1, groupCount do
  if redis.call('SISMEMBER', KEYS[2], ARGV[1 + i]) == 0 then return { 'RETRY' } end
end
local count = tonumber(meta[1])
local span = math.max(count, tonumber(meta[2]) or count)
local retiringSpan = tonumber(meta[3]) or count
if span == count then
  -- Nothing newly removed; shards an earlier call retired and did not finish deleting are answered.
  return { ERR_NONE, '', count, math.max(count, retiringSpan), meta[4] or meta[5] }
end
for i = 1, groupCount do
  local group = ARGV[1 + i]
  if redis.call('HEXISTS', KEYS[1 + 2 * i], 'cutover') == 1 then
    return { ERR_RESIZE_IN_PROGRESS, 'group ' .. group .. ' has not drained the removed shards yet', 0, 0, 0 }
  end
  for shard = count, span - 1 do
    local owner = redis.call('HGET', KEYS[2 + 2 * i], tostring(shard))
    if owner then
      return { ERR_RESIZE_IN_PROGRESS, 'shard ' .. shard .. ' is still held by member ' .. owner .. ' of group ' .. group, 0, 0, 0 }
    end
  end
end
-- A group created from now on reads only shards below the span: the resize history stays (it still
-- orders the surviving shards), the retired shards just drop out of every step. Their dead-letter
-- streams are kept (letters are an operator's to replay or purge, not the shrink's to drop):
-- deadLetterSpan remembers how far they reach, so that reading and purging dead letters finds them.
local deadLetterSpan = math.max(span, tonumber(redis.call('HGET', KEYS[1], 'deadLetterSpan')) or 0)
retiringSpan = math.max(span, retiringSpan)
redis.call('HSET', KEYS[1], 'shardSpan', count, 'deadLetterSpan', deadLetterSpan,
  'readableShardSet', redis.call('HGET', KEYS[1], 'writableShardSet'),
  'retiringSpan', retiringSpan, 'retiredVersion', meta[5])
return { ERR_NONE, '', count, retiringSpan, meta[5] }
