--[[
  deleteRetiredShard-n: the second step of CoordinatorAdmin.deleteDrainedShards, once per retired
  shard, in the shard's own hash slot: re-checks, atomically with the delete, what the first step
  (retireShards-n.lua, in the coordinator's slot) and the look before it checked, since any command
  may have run in between (SPEC 10.5): that no resize since the retirement has reached the shard,
  that its routing marker refuses every write, and that every group has processed all of it. Only
  then deletes the shard stream and the groups' fencing tokens. The routing marker stays (it is
  what refuses late writes), and so do the dead-letter streams and replay records.

  KEYS[1]  the shard stream   KEYS[2]  its routing marker (includes/routing.lua)
  KEYS[3..2+G]  the fencing tokens of the prefix's groups on this shard
  ARGV[1]  shardIndex   ARGV[2]  the metadataVersion the shard was retired at
  ARGV[3]  G   ARGV[4..3+G]  the prefix's group names, in the order of their fencing tokens

  Output: {'deleted'} done (also when there was nothing left to delete: safe to run twice);
          {'regrown', version} a newer resize reached the shard: nothing deleted, it is the
          stream's again; {'writable', count} the marker lets writes in: nothing deleted;
          {'unprocessed', group, undelivered, pending} a group has not processed all of it: nothing
          deleted (undelivered is counted up to MAX_COUNTED).
]]
--- @include "includes/time"
--- @include "includes/routing"

-- Counting what a group has not been delivered stops here: the refusal needs a number, not all of it.
local MAX_COUNTED = 1000

local stream, marker = KEYS[1], KEYS[2]
local shardIndex, retiredVersion, groupCount = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

local version = tonumber(redis.call('HGET', marker, 'version') or '0')
if version > retiredVersion then return { 'regrown', version } end
local inEffect = routingInEffect(marker, nowMs)
local from = tonumber(redis.call('HGET', marker, 'count') or '0')
if inEffect > shardIndex or from > shardIndex then return { 'writable', math.max(inEffect, from) } end

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
redis.call('DEL', stream)
for i = 1, groupCount do redis.call('DEL', KEYS[2 + i]) end
return { 'deleted' }
