--[[
  completeCutover-14: ends a group's cutover after a resize (docs/resharding.md). The caller (a
  member of the group, or CoordinatorAdmin) has checked the shard streams: every shard the cutover
  waits for is processed by the group up to the cutover's `until` id (growth) or drained (shrink),
  and Redis time is past `until`. Both stay true once true (stream ids only grow, acknowledged
  entries stay acknowledged), so the check and this call need not be atomic; the shard streams live
  in other hash slots, so they could not be.

  KEYS[1..14]  the group's coordinator keys (includes/groupKeys.lua)
  ARGV[1..8]   coordinator settings and the group's wake channel (includes/config.lua)
  ARGV[9]  the cutover's metadataVersion (only that cutover is completed)

  Output: { errorCode, message, completed (0/1) }. The group's groupEpoch and the stream's
  metadataVersion increase, members are woken, and the group's readable shard set becomes
  0..shardCount-1, or, for a group created after resizes with more steps to cross, the next step of
  its `cutoverChain` (includes/replayCutovers.lua) becomes its cutover, under the new metadataVersion.
]]
--- @include "includes/errorCodes"
--- @include "includes/groupKeys"
--- @include "includes/config"
--- @include "includes/time"
--- @include "includes/events"
--- @include "includes/wake"
--- @include "includes/group"

local raw = redis.call('HGET', K.groupMeta, 'cutover')
if not raw then return { ERR_NONE, '', 0 } end
local cutover = cjson.decode(raw)
if tostring(cutover.version) ~= ARGV[9] then return { ERR_NONE, '', 0 } end
local now = nowMs()
if now <= tonumber(cutover['until']) then
  return { ERR_INVALID_REQUEST, 'the cutover of metadataVersion ' .. ARGV[9] .. ' cannot complete before ' .. cutover['until'], 0 }
end
local g = loadGroup(K)
redis.call('HDEL', K.groupMeta, 'cutover', 'readableShardSet')
bumpGroupEpoch(K, g, now)
local version = redis.call('HINCRBY', K.streamMeta, 'metadataVersion', 1)
redis.call('HSET', K.streamMeta, 'updatedAt', now)
local chain = redis.call('HGET', K.groupMeta, 'cutoverChain')
if chain then
  local steps = cjson.decode(chain)
  local nextStep = table.remove(steps, 1)
  nextStep.version = version
  redis.call('HSET', K.groupMeta, 'cutover', cjson.encode(nextStep), 'readableShardSet', nextStep.wait)
  if #steps > 0 then
    redis.call('HSET', K.groupMeta, 'cutoverChain', cjson.encode(steps))
  else
    redis.call('HDEL', K.groupMeta, 'cutoverChain')
  end
end
appendEvent(K, cfg, g, 'CUTOVER_COMPLETED', '', 'resize of metadataVersion ' .. ARGV[9] .. ' ('
  .. cutover.from .. ' -> ' .. cutover.to .. ' shards); metadataVersion ' .. version
  .. (chain and '; next: the following resize in the stream\'s history' or ''))
wakeMembers(cfg, 'cutover')
return { ERR_NONE, '', 1 }
