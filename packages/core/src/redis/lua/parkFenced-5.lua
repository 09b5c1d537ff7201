--[[
  parkFenced-5: parks an entry behind its key's deferred ones (docs/runtime.md, Deferred retries,
  deferredOrder 'key'): acknowledges it and puts it in the group's deferred schedule of its shard,
  due with its key's deferral and after everything of the key scheduled before it, in one script,
  only while the caller still holds the shard's fencing token (SPEC 9.2, as deferFenced-5.lua).
  Both happen or neither. The key's state (includes/keyOrder.lua) decides here, not the caller's
  mirror of it, which may be behind (a release whose reply was lost):
  - the key has entries in the schedule: the entry is parked behind them, unless it is a released
    copy of the group's at or below the key's barrier (released before them: they are entries read
    before that release, parked behind it; it runs), or a released copy of a key whose release
    stopped at its bound (partial: it was released ahead of the rest, so it runs once they are
    released, 'hold');
  - the key has none, but a barrier above the entry, and the entry is no released copy: it was read
    before its key's last release, whose entries come before it, so it is parked behind them, due now;
  - else it runs ('run'), nothing written.

  KEYS[1]  the shard stream   KEYS[2]  the shard's fencing token of the group
  KEYS[3]  the group's deferred schedule on the shard   KEYS[4]  its entries
  KEYS[5]  the group's key states on the shard
  ARGV[1]  consumerGroup   ARGV[2]  the caller's token   ARGV[3]  the entry id
  ARGV[4]  the entry's key field   ARGV[5]  '1' when the entry is the group's own released copy
  ARGV[6..]  the fields the entry is released with (its own, `g`, `a`, and `q` when `a` is 0)
  Output: {'parked' | 'run' | 'hold', key state} (includes/keyOrder.lua keyStateReply); {'', key
  state} when the entry is no longer pending (a resent call whose first run landed); -1 when the
  caller no longer holds the shard (nothing written, nothing acknowledged).
]]
--- @include "includes/fence"
--- @include "includes/time"
--- @include "includes/schedule"
--- @include "includes/keyOrder"
--- @include "includes/compareStreamIds"

local stream, fence, schedule, entries, keyStates = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local consumerGroup, token, entryId, keyField, releasedCopy = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5] == '1'

if not holdsFence(fence, token) then return -1 end
local state = readKeyState(keyStates, keyField)
if #redis.call('XPENDING', stream, consumerGroup, entryId, entryId, 1) == 0 then return { '', keyStateReply(keyField, state) } end
local dueMs
if state.count > 0 then
  if releasedCopy and state.barrier ~= '' and compareStreamIds(entryId, state.barrier) <= 0 then
    return { 'run', keyStateReply(keyField, state) }
  end
  if releasedCopy and state.partial == 1 then return { 'hold', keyStateReply(keyField, state) } end
  dueMs = state.due
elseif state.barrier ~= '' and not releasedCopy and compareStreamIds(entryId, state.barrier) < 0 then
  dueMs = nowMs()
  state.due = dueMs
else
  return { 'run', keyStateReply(keyField, state) }
end
-- An entry's 4 fields, `g`, `a` and `q` (entry-format.ts): 14 values; more would make the
-- release's unpack fail on every turn (SPEC 10.7), as deferFenced-5.lua refuses.
local MAX_VALUES = 14
if #ARGV - 5 > MAX_VALUES then
  return redis.error_reply(string.format('parkFenced: at most %d field values, got %d', MAX_VALUES, #ARGV - 5))
end
local fields = {}
for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
-- The schedule first: if it fails (WRONGTYPE, OOM) the script stops before the ack, the entry stays
-- pending and the caller tries again.
local scheduled = scheduleEntry(schedule, entries, nextDeferralId(entries, 'p'), dueMs, fields)
if type(scheduled) == 'table' then return redis.error_reply(tostring(scheduled.err)) end
state.count = state.count + 1
writeKeyState(keyStates, keyField, state)
redis.call('HINCRBY', keyStates, PARKED_COUNT, 1)
redis.call('XACK', stream, consumerGroup, entryId)
return { 'parked', keyStateReply(keyField, state) }
