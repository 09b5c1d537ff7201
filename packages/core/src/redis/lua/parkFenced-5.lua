--[[
  parkFenced-5: keeps entries of a shard in their keys' order behind the keys' deferred entries
  (docs/runtime.md, Deferred retries, deferredOrder 'key'), deciding each on its key's state
  (includes/keyOrder.lua keyOrderVerdict; the caller's mirror of it may be behind: a release whose
  reply was lost), only while the caller still holds the shard's fencing token (SPEC 9.2, as
  deferFenced-5.lua). One call decides the entries the member asked about in one event-loop turn,
  in the order given (an entry's state is what the entries before it left): the call itself, the
  token check, the reads and writes of the key states and the parked count are paid once per call,
  not once per entry, which is most of what a park cost when it was a call of its own. Each entry:
  - 'park': acknowledged and put in the group's deferred schedule of the shard, due with the key's
    deferral and after everything scheduled before it (counted in the key's state);
  - 'reappend': acknowledged and appended again at the stream end as a copy of the group's (`g`,
    `a`, `r`), behind the key's copies in the stream that come before it (the key's barrier);
  - 'hold' or 'run': nothing written (it waits for the rest of its key's release, or it runs).
  An entry's write and its ack happen in this one script, both or neither.

  KEYS[1]  the shard stream   KEYS[2]  the shard's fencing token of the group
  KEYS[3]  the group's deferred schedule on the shard   KEYS[4]  its entries
  KEYS[5]  the group's key states on the shard
  ARGV[1]  consumerGroup   ARGV[2]  the caller's token
  ARGV[3..] per entry, at most MAX_ENTRIES of them, four values:
           its id; its key field; its origin ('o' original, 'r' released copy, 'a' appended again);
           the fields it is parked or appended with (its own, `g`, `a`, and `q` when `a` is 0),
           packed as its schedule keeps them (packFields: cmsgpack's bytes), at most 14 values
  Output: -1 when the caller no longer holds the shard (nothing written, nothing acknowledged);
  else per entry, in the order given, {'park' | 'reappend' | 'hold' | 'run', key state}
  (includes/keyOrder.lua keyStateReply), {'', key state} when the entry is no longer pending (a
  resent call whose first run landed), or {'!', Redis' error} when its write failed (WRONGTYPE,
  OOM): nothing of it is written or acknowledged, nor of the entries after it (the same error),
  which stay pending for the caller to ask again; the entries before it are as answered.
]]
--- @include "includes/fence"
--- @include "includes/schedule"
--- @include "includes/compareStreamIds"
--- @include "includes/keyOrder"

-- The most entries one call decides: the member sends fewer (ShardClient PARKS_PER_CALL); the bound
-- keeps the script's run, and the key fields it reads in one HMGET, small.
local MAX_ENTRIES = 256

local stream, fence, schedule, entries, keyStates = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local consumerGroup, token = ARGV[1], ARGV[2]
local count = (#ARGV - 2) / 4
if count < 1 or count > MAX_ENTRIES or count ~= math.floor(count) then
  return redis.error_reply(string.format('parkFenced: 1 to %d entries of four values each, got %d values', MAX_ENTRIES, #ARGV - 2))
end

if not holdsFence(fence, token) then return -1 end
-- An entry's 4 fields, `g`, `a` and `q` (entry-format.ts): 14 values, packed by the caller (a park
-- stores them as they come: building a Lua table and packing it was a part of its cost). Every
-- entry's are checked before anything is written.
for i = 0, count - 1 do
  local packed, refused = boundedPacked(ARGV[6 + i * 4], 14, 'parkFenced')
  if not packed then return refused end
end

-- The key states of the call's keys and the shard's parked count in one read; written back once,
-- at the end, for the keys whose state changed.
local fields, states, changed, touched = {}, {}, {}, {}
for i = 0, count - 1 do
  local field = ARGV[4 + i * 4]
  if not states[field] then
    states[field] = true
    fields[#fields + 1] = field
  end
end
fields[#fields + 1] = PARKED_COUNT
local read = redis.call('HMGET', keyStates, unpack(fields))
for i = 1, #fields - 1 do states[fields[i]] = parseKeyState(read[i]) end
local parked = tonumber(read[#read] or '0') or 0
local parkedBefore = parked

-- The group's deferral sequence: taken once with HINCRBY, counted on here, stored once at the end.
-- A failure stops the loop (decide, below), not the script: the entries before it are written and
-- acknowledged, and their key states and the sequence must be written too.
local firstSeq, seq
local function nextParkId()
  if seq then
    seq = seq + 1
  else
    local taken = redis.pcall('HINCRBY', entries, DEFERRAL_SEQ, 1)
    if type(taken) == 'table' then return taken end
    seq, firstSeq = taken, taken
  end
  return deferralId(seq, 'p')
end

-- The sequence, the changed key states and the parked count, written once, on every way out.
local function finish()
  if seq and seq ~= firstSeq then redis.call('HSET', entries, DEFERRAL_SEQ, string.format('%.0f', seq)) end
  local kept, gone = {}, {}
  for _, field in ipairs(touched) do
    local s = states[field]
    if keyStateEmpty(s) then
      gone[#gone + 1] = field
    else
      kept[#kept + 1] = field
      kept[#kept + 1] = keyStateText(s)
    end
  end
  if parked ~= parkedBefore then
    kept[#kept + 1] = PARKED_COUNT
    kept[#kept + 1] = string.format('%.0f', parked)
  end
  if #kept > 0 then redis.call('HSET', keyStates, unpack(kept)) end
  if #gone > 0 then redis.call('HDEL', keyStates, unpack(gone)) end
end

local function change(field)
  if not changed[field] then
    changed[field] = true
    touched[#touched + 1] = field
  end
end

-- One entry's decision and its writes: its reply, or a raised error (a failed write raises, as
-- does anything unforeseen) that stops the loop with nothing of this entry written or acknowledged.
local function decide(i)
  local entryId, field, origin, packed = ARGV[3 + i * 4], ARGV[4 + i * 4], ARGV[5 + i * 4], ARGV[6 + i * 4]
  local state = states[field]
  local verdict = keyOrderVerdict(state, entryId, origin)
  if verdict == 'park' then
    local id = nextParkId()
    local scheduled = type(id) == 'table' and id or schedulePacked(schedule, entries, id, state.due, packed, field)
    if type(scheduled) == 'table' then error(scheduled) end
    -- The ack's answer says whether the entry was still pending. Not, the schedule entry just written
    -- is taken back in this same script (nobody saw it) and nothing else is written: an XPENDING
    -- ahead of the write cost a park about a fifth of its Redis time, and a resent call is rare.
    -- A failed ack (not pending is no failure) takes the write back too: nothing of the entry stays.
    local acked = redis.pcall('XACK', stream, consumerGroup, entryId)
    if type(acked) == 'table' or acked == 0 then
      redis.call('ZREM', schedule, scheduled)
      redis.call('HDEL', entries, scheduled, scheduled .. KEY_FIELD)
      if type(acked) == 'table' then error(acked) end
      return { '', keyStateReply(field, state) }
    end
    state.count = state.count + 1
    parked = parked + 1
    change(field)
    return { verdict, keyStateReply(field, state) }
  end
  -- Whether the entry is still pending (not: a resent call whose first run landed), asked ahead of
  -- anything written but a park's (above).
  if #redis.call('XPENDING', stream, consumerGroup, entryId, entryId, 1) == 0 then return { '', keyStateReply(field, state) } end
  if verdict == 'reappend' then
    local copy = cmsgpack.unpack(packed)
    copy[#copy + 1] = 'r'
    copy[#copy + 1] = '1'
    local appended = redis.call('XADD', stream, '*', unpack(copy))
    -- A failed ack takes the copy back: the entry stays pending, once.
    local acked = redis.pcall('XACK', stream, consumerGroup, entryId)
    if type(acked) == 'table' then
      redis.call('XDEL', stream, appended)
      error(acked)
    end
    state.barrier = appended
    change(field)
  end
  return { verdict, keyStateReply(field, state) }
end

-- Every way out writes what the entries decided so far changed (finish): the entries before a
-- failure are written and acknowledged, so their keys' counts and the sequence must be too; the
-- failed entry and the ones after it are told its error and stay pending.
local replies = {}
for i = 0, count - 1 do
  local ok, reply = pcall(decide, i)
  if not ok then
    local message = type(reply) == 'table' and tostring(reply.err) or tostring(reply)
    for _ = i, count - 1 do replies[#replies + 1] = { '!', message } end
    break
  end
  replies[#replies + 1] = reply
end
finish()
return replies
