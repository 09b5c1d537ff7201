--[[
  deferFenced-5: a deferred retry (docs/runtime.md, Deferred retries): acknowledges an entry and
  puts it in the group's deferred schedule of its shard, with its attempt count, in one script, only
  while the caller still holds the shard's fencing token (SPEC 9.2: side writes are fenced like
  acks). Both happen or neither: a member that lost the shard defers nothing and acks nothing (its
  new owner decides about the entry), and a member that dies after this call loses nothing (the
  entry is in the schedule, whoever owns the shard releases it when due: releaseDue-8.lua).

  KEYS[1]  the shard stream   KEYS[2]  the shard's fencing token of the group
  KEYS[3]  the group's deferred schedule on the shard (sorted set: entry id -> due time, Redis ms)
  KEYS[4]  its entries (hash: schedule id -> fields, cmsgpack; includes/schedule.lua)
  KEYS[5]  the group's key states on the shard (includes/keyOrder.lua)
  ARGV[1]  consumerGroup   ARGV[2]  the caller's token   ARGV[3]  the entry id
  ARGV[4]  the delay (ms, from this script's Redis time)
  ARGV[5]  the entry's key field (includes/keyOrder.lua), counted in its key's state so that the
           key's later entries are parked behind it (deferredOrder 'key'); '' for none ('none')
  ARGV[6]  the fields the entry is released with (its own, its group `g` and attempts `a`), packed
           as its schedule keeps them (packFields: cmsgpack's bytes), at most 12 values
  A key that may have entries behind this one that a later release would not come out before
  (includes/keyOrder.lua keyMayDefer: entries in the schedule, or copies appended again since its
  last release and after this entry) defers nothing: 'busy', the caller retries in place, holding the key.
  Output: {due time (Redis ms), key state} (key state: includes/keyOrder.lua keyStateReply, {} for
  none); {'busy', key state} (above); {'', key state} when the entry is no longer pending (a resent call whose first run landed:
  nothing is written twice, and the state tells the caller what its first run counted); -1 when
  the caller no longer holds the shard.
]]
--- @include "includes/fence"
--- @include "includes/time"
--- @include "includes/schedule"
--- @include "includes/compareStreamIds"
--- @include "includes/keyOrder"

local stream, fence, schedule, entries, keyStates = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local consumerGroup, token, entryId, keyField = ARGV[1], ARGV[2], ARGV[3], ARGV[5]

if not holdsFence(fence, token) then return -1 end
local state = keyField ~= '' and readKeyState(keyStates, keyField) or nil
local function stateReply()
  if keyField == '' then return {} end
  return keyStateReply(keyField, state)
end
local function pending()
  return #redis.call('XPENDING', stream, consumerGroup, entryId, entryId, 1) > 0
end
-- At most an entry's 4 fields and the two of a deferral (entry-format.ts): 12 values, packed by the caller.
local packed, refused = boundedPacked(ARGV[6], 12, 'deferFenced')
if not packed then return refused end
local dueMs = nowMs() + tonumber(ARGV[4])
if state and not keyMayDefer(state, entryId) then
  -- Not pending any more (a resent call whose first run landed, counted in the key since): said so,
  -- rather than 'busy', which would run it again in place.
  if not pending() then return { '', stateReply() } end
  return { 'busy', stateReply() }
end
-- The schedule first: if it fails (WRONGTYPE, OOM) the script stops before the ack, so the entry
-- stays pending and the caller tries again.
local scheduled = schedulePacked(schedule, entries, nextDeferralId(entries, keyField == '' and 'n' or ''), dueMs, packed, state and keyField or nil)
if type(scheduled) == 'table' then return redis.error_reply(tostring(scheduled.err)) end
-- The ack's answer says whether the entry was still pending. Not (a resent call whose first run
-- landed), the schedule entry just written is taken back in this same script (nobody saw it) and
-- nothing else is written: an XPENDING ahead of the write cost a fifth of a park's Redis time
-- (parkFenced-5.lua), and a resent call is rare.
if redis.call('XACK', stream, consumerGroup, entryId) == 0 then
  redis.call('ZREM', schedule, scheduled)
  redis.call('HDEL', entries, scheduled, scheduled .. KEY_FIELD)
  return { '', stateReply() }
end
if state then
  -- Counted in its key's state: the key's later entries are parked behind it until it is released.
  -- A parked entry takes the latest due time, so it never comes out before the deferral it waits for.
  -- A new cycle: the key's copies released before it come after it now (includes/keyOrder.lua).
  state.count = state.count + 1
  state.due = dueMs
  state.floor = ''
  state.partial = 0
  writeKeyState(keyStates, keyField, state)
end
return { string.format('%.0f', dueMs), stateReply() }
