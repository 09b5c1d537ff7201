--[[
  deleteRetiredShard-n: the second step of CoordinatorAdmin.deleteDrainedShards, once per retired
  shard, in the shard's own hash slot: re-checks, atomically with the delete, what the first step
  (retireShards-n.lua, in the coordinator's slot) and the look before it checked, since any command
  may have run in between (SPEC 10.5): that no resize since the retirement has reached the shard,
  that its routing marker refuses every write, that nothing waits in its schedule nor in a group's
  deferred schedule, and that every group has processed all of it. Only then deletes every key of
  the shard: its stream, its schedule and the hash beside it (which keeps the last schedule id and
  move number given even when empty), and per group its fencing token, its deferred schedule, that
  schedule's hash but for the last deferral number given (kept alone in it, so that a shard grown
  back never gives a deferral id again) and its key states (barriers not swept yet).
  The routing marker stays (it is what refuses late writes; it keeps the schedule's last id then,
  includes/schedule.lua MARKER_SCHEDULE_SEQ, so that a shard grown back never gives an id again),
  and so do the moves-taken log (kept as the marker is), the dead-letter streams and replay
  records; a producer's write log expires.

  KEYS[1]  the shard stream   KEYS[2]  its routing marker (includes/routing.lua)
  KEYS[3]  its schedule   KEYS[4]  its scheduled entries
  KEYS[5..4+4G]  per group of the prefix, in ARGV's order: its fencing token on this shard, its
           deferred schedule, that schedule's entries and its key states (keys.ts shardDeferred*)
  ARGV[1]  shardIndex   ARGV[2]  the metadataVersion the shard was retired at
  ARGV[3]  G   ARGV[4..3+G]  the prefix's group names

  Output: {'deleted'} done (also when there was nothing left to delete: safe to run twice);
          {'regrown', version} a newer resize reached the shard: nothing deleted, it is the
          stream's again; {'writable', count} the marker lets writes in: nothing deleted;
          {'unprocessed', group, undelivered, pending} a group has not processed all of it: nothing
          deleted (undelivered is counted up to MAX_COUNTED); {'scheduled', group, scheduled,
          deferred} entries wait in the shard's schedule (group '') or a group's deferred schedule:
          nothing deleted.
]]
--- @include "includes/time"
--- @include "includes/routing"
--- @include "includes/schedule"

-- Counting what a group has not been delivered stops here: the refusal needs a number, not all of it.
local MAX_COUNTED = 1000

local stream, marker, schedule, scheduledEntries = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- The keys of the i-th group: its fencing token, deferred schedule, deferred entries, key states.
local function groupKeys(i)
  local at = 4 + 4 * (i - 1)
  return KEYS[at + 1], KEYS[at + 2], KEYS[at + 3], KEYS[at + 4]
end
local shardIndex, retiredVersion, groupCount = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

local version = tonumber(redis.call('HGET', marker, 'version') or '0')
if version > retiredVersion then return { 'regrown', version } end
local inEffect = routingInEffect(marker, nowMs)
local from = tonumber(redis.call('HGET', marker, 'count') or '0')
if inEffect > shardIndex or from > shardIndex then return { 'writable', math.max(inEffect, from) } end

local scheduled = redis.call('ZCARD', schedule)
if scheduled > 0 then return { 'scheduled', '', scheduled, 0 } end
for i = 1, groupCount do
  local _, deferred = groupKeys(i)
  local waiting = redis.call('ZCARD', deferred)
  if waiting > 0 then return { 'scheduled', ARGV[3 + i], 0, waiting } end
end

if redis.call('EXISTS', stream) == 1 then
  local onStream = {}
  for _, info in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local fields = {}
    for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
    onStream[fields['name']] = fields
  end
  for i = 1, groupCount do
    local group = ARGV[3 + i]
    local fields = onStream[group]
    local undelivered, pending
    if fields then
      undelivered = #redis.call('XRANGE', stream, '(' .. fields['last-delivered-id'], '+', 'COUNT', MAX_COUNTED)
      pending = tonumber(fields['pending'])
    else
      -- The group never read the shard: all of it is undelivered to it.
      undelivered, pending = math.min(redis.call('XLEN', stream), MAX_COUNTED), 0
    end
    if undelivered + pending > 0 then return { 'unprocessed', group, undelivered, pending } end
  end
end
-- The last schedule id given outlives the hash, in the marker: a shard grown back goes on after it.
local lastScheduled = redis.call('HGET', scheduledEntries, SCHEDULE_SEQ)
if lastScheduled then redis.call('HSET', marker, MARKER_SCHEDULE_SEQ, lastScheduled) end
redis.call('DEL', stream, schedule, scheduledEntries)
for i = 1, groupCount do
  local token, deferred, deferredEntries, keyStates = groupKeys(i)
  -- A group's last deferral id stays, alone in its hash: a shard grown back goes on after it, so that
  -- an id an operator saw before (schedule drop/release by id) never names another entry.
  -- ('#seq': includes/keyOrder.lua DEFERRAL_SEQ, the field deferrals are numbered from.)
  local lastDeferred = redis.call('HGET', deferredEntries, '#seq')
  redis.call('DEL', token, deferred, deferredEntries, keyStates)
  if lastDeferred then redis.call('HSET', deferredEntries, '#seq', lastDeferred) end
end
return { 'deleted' }
