--[[
  parkFenced-5: keeps a key's order behind its deferred entries (docs/runtime.md, Deferred retries,
  deferredOrder 'key'), deciding on the key's state (includes/keyOrder.lua keyOrderVerdict; the
  caller's mirror of it may be behind: a release whose reply was lost), only while the caller still
  holds the shard's fencing token (SPEC 9.2, as deferFenced-5.lua):
  - 'park': acknowledged and put in the group's deferred schedule of the shard, due with the key's
    deferral and after everything scheduled before it (counted in the key's state);
  - 'reappend': acknowledged and appended again at the stream end as a copy of the group's (`g`,
    `a`, `r`), behind the key's copies in the stream that come before it (the key's barrier);
  - 'hold' or 'run': nothing written (it waits for the rest of its key's release, or it runs).
  The write and the ack happen in this one script, both or neither.

  KEYS[1]  the shard stream   KEYS[2]  the shard's fencing token of the group
  KEYS[3]  the group's deferred schedule on the shard   KEYS[4]  its entries
  KEYS[5]  the group's key states on the shard
  ARGV[1]  consumerGroup   ARGV[2]  the caller's token   ARGV[3]  the entry id
  ARGV[4]  the entry's key field   ARGV[5]  its origin: 'o' original, 'r' released copy, 'a' appended again
  ARGV[6]  the fields it is parked or appended with (its own, `g`, `a`, and `q` when `a` is 0),
           packed as its schedule keeps them (packFields: cmsgpack's bytes), at most 14 values
  Output: {'park' | 'reappend' | 'hold' | 'run', key state} (includes/keyOrder.lua keyStateReply);
  {'', key state} when the entry is no longer pending (a resent call whose first run landed); -1
  when the caller no longer holds the shard (nothing written, nothing acknowledged).
]]
--- @include "includes/fence"
--- @include "includes/schedule"
--- @include "includes/compareStreamIds"
--- @include "includes/keyOrder"

local stream, fence, schedule, entries, keyStates = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local consumerGroup, token, entryId, keyField, origin = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

if not holdsFence(fence, token) then return -1 end
-- The key's state and the shard's parked count in one read (the park writes both in one).
local read = redis.call('HMGET', keyStates, keyField, PARKED_COUNT)
local state = parseKeyState(read[1])
local verdict = keyOrderVerdict(state, entryId, origin)
-- Whether the entry is still pending (not: a resent call whose first run landed), asked ahead of
-- anything written except for a park (below).
if verdict ~= 'park' and #redis.call('XPENDING', stream, consumerGroup, entryId, entryId, 1) == 0 then
  return { '', keyStateReply(keyField, state) }
end
if verdict == 'run' or verdict == 'hold' then return { verdict, keyStateReply(keyField, state) } end
-- An entry's 4 fields, `g`, `a` and `q` (entry-format.ts): 14 values, packed by the caller (a
-- park stores them as they come: building a Lua table and packing it was a part of its cost).
local packed, refused = boundedPacked(ARGV[6], 14, 'parkFenced')
if not packed then return refused end
-- The write first: if it fails (WRONGTYPE, OOM) the script stops before the ack, the entry stays
-- pending and the caller tries again.
if verdict == 'park' then
  local scheduled = schedulePacked(schedule, entries, nextDeferralId(entries, 'p'), state.due, packed, keyField)
  if type(scheduled) == 'table' then return redis.error_reply(tostring(scheduled.err)) end
  -- The ack's answer says whether the entry was still pending. Not, the schedule entry just written
  -- is taken back in this same script (nobody saw it) and nothing else is written: an XPENDING
  -- ahead of the write cost a park about a fifth of its Redis time, and a resent call is rare.
  if redis.call('XACK', stream, consumerGroup, entryId) == 0 then
    redis.call('ZREM', schedule, scheduled)
    redis.call('HDEL', entries, scheduled, scheduled .. KEY_FIELD)
    return { '', keyStateReply(keyField, state) }
  end
  state.count = state.count + 1
  -- The key's state and the shard's parked count in one write, as they were read.
  redis.call('HSET', keyStates, keyField, keyStateText(state), PARKED_COUNT, (tonumber(read[2] or '0') or 0) + 1)
  return { verdict, keyStateReply(keyField, state) }
end
local fields = cmsgpack.unpack(packed)
fields[#fields + 1] = 'r'
fields[#fields + 1] = '1'
state.barrier = redis.call('XADD', stream, '*', unpack(fields))
writeKeyState(keyStates, keyField, state)
redis.call('XACK', stream, consumerGroup, entryId)
return { verdict, keyStateReply(keyField, state) }
