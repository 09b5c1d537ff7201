--[[
  deferFenced-4: a deferred retry (docs/runtime.md, Deferred retries): acknowledges an entry and
  puts it in the group's deferred schedule of its shard, with its attempt count, in one script, only
  while the caller still holds the shard's fencing token (SPEC 9.2: side writes are fenced like
  acks). Both happen or neither: a member that lost the shard defers nothing and acks nothing (its
  new owner decides about the entry), and a member that dies after this call loses nothing (the
  entry is in the schedule, whoever owns the shard releases it when due: releaseDue-7.lua).

  KEYS[1]  the shard stream   KEYS[2]  the shard's fencing token of the group
  KEYS[3]  the group's deferred schedule on the shard (sorted set: entry id -> due time, Redis ms)
  KEYS[4]  its entries (hash: entry id -> fields, cmsgpack; includes/schedule.lua)
  ARGV[1]  consumerGroup   ARGV[2]  the caller's token   ARGV[3]  the entry id
  ARGV[4]  the delay (ms, from this script's Redis time)
  ARGV[5..]  the fields the entry is released with (its own, its group `g` and attempts `a`)
  Output: the due time (Redis ms); '' when the entry is no longer pending (a resent call whose first
  run landed: nothing is written twice); -1 when the caller no longer holds the shard.
]]
--- @include "includes/fence"
--- @include "includes/time"
--- @include "includes/schedule"

local stream, fence, schedule, entries = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local consumerGroup, token, entryId = ARGV[1], ARGV[2], ARGV[3]

if not holdsFence(fence, token) then return -1 end
if #redis.call('XPENDING', stream, consumerGroup, entryId, entryId, 1) == 0 then return '' end
-- At most an entry's 4 fields and the two of a deferral (entry-format.ts): 12 values. The caller
-- keeps each field once (ShardClient.defer); more would make the release's unpack fail on every
-- turn (releaseDue-7.lua) and hold up the group's other deferred retries on the shard (SPEC 10.7).
local MAX_VALUES = 12
if #ARGV - 4 > MAX_VALUES then
  return redis.error_reply(string.format('deferFenced: at most %d field values, got %d', MAX_VALUES, #ARGV - 4))
end
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
local dueMs = nowMs() + tonumber(ARGV[4])
-- The schedule first: if it fails (WRONGTYPE, OOM) the script stops before the ack, so the entry
-- stays pending and the caller tries again.
local scheduled = scheduleEntry(schedule, entries, entryId, dueMs, fields)
if type(scheduled) == 'table' then return redis.error_reply(tostring(scheduled.err)) end
redis.call('XACK', stream, consumerGroup, entryId)
return string.format('%.0f', dueMs)
