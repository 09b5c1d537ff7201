-- A group's deferred order on a shard (docs/runtime.md, Deferred retries, deferredOrder 'key'): a
-- hash (keys.ts shardDeferredKeys), in the shard stream's slot, field = an entry's key ('k' and the
-- routing key; '-' for entries without one: user data is a field, never a key name) -> its state
-- "count|due|partial|floor|released|barrier" (the rules: member/handle/key-order.ts keyOrderVerdict):
--   count     how many of its entries are in the group's deferred schedule (deferred or parked);
--   due       the due time (Redis ms) a parked entry takes: the key's latest deferral's;
--   partial   1 when a release stopped at its bound with some of them still due (releaseDue-8.lua);
--   floor     the stream id of the first copy released since the key's last deferral ('' before);
--   released  the stream id of its last released copy;
--   barrier   the stream id of its last copy appended to the stream (released, or appended again).
-- Reserved fields start with '#' (no entry key field does): the parked count and the barrier sweep's cursor.
local PARKED_COUNT = '#parked'
local BARRIER_CURSOR = '#cursor'
-- The group's deferral sequence, kept in its deferred entries hash (as the schedule's SCHEDULE_SEQ).
local DEFERRAL_SEQ = '#seq'

-- A key's state from its stored text (nil or malformed: the empty state).
local function parseKeyState(raw)
  if raw then
    local count, due, partial, floor, released, barrier = string.match(raw, '^(%d+)|(%d+)|(%d)|([%d-]*)|([%d-]*)|([%d-]*)$')
    if count then
      return { count = tonumber(count), due = tonumber(due), partial = tonumber(partial), floor = floor, released = released, barrier = barrier }
    end
  end
  return { count = 0, due = 0, partial = 0, floor = '', released = '', barrier = '' }
end

local function readKeyState(keysKey, field)
  return parseKeyState(redis.call('HGET', keysKey, field))
end

-- A key's state as stored (writeKeyState), for a state that counts entries or has a barrier.
local function keyStateText(s)
  return string.format('%d|%.0f|%d|%s|%s|%s', math.max(s.count, 0), s.due, s.partial, s.floor, s.released, s.barrier)
end

-- Whether a key's state has nothing in the schedule and nothing appended: it is deleted, not kept.
local function keyStateEmpty(s)
  return s.count <= 0 and s.barrier == ''
end

-- Writes a key's state; an empty one (keyStateEmpty) is deleted.
local function writeKeyState(keysKey, field, s)
  if keyStateEmpty(s) then
    redis.call('HDEL', keysKey, field)
  else
    redis.call('HSET', keysKey, field, keyStateText(s))
  end
end

-- A key's state as replies carry it (ShardClient keyStateOf): field, count, due, partial, floor, released, barrier.
local function keyStateReply(field, s)
  return { field, s.count, string.format('%.0f', s.due), s.partial, s.floor, s.released, s.barrier }
end

-- Whether an entry of the key may be deferred (member/handle/key-order.ts keyMayDefer).
local function keyMayDefer(s, entryId)
  return s.count == 0 and (s.barrier == s.released or compareStreamIds(entryId, s.barrier) >= 0)
end

-- What becomes of an entry (member/handle/key-order.ts keyOrderVerdict, the same rules): origin
-- 'o' an original, 'r' a copy released from the schedule, 'a' a copy appended again.
local function keyOrderVerdict(s, entryId, origin)
  if s.count == 0 and s.barrier == '' then return 'run' end
  if s.partial == 1 then return 'hold' end
  if origin == 'r' then
    if s.floor ~= '' and compareStreamIds(entryId, s.floor) >= 0 then return s.count > 0 and 'hold' or 'run' end
    if s.count > 0 then return 'park' end
    return s.floor == '' and 'run' or 'reappend'
  end
  local barrier = origin == 'o' and s.barrier or s.released
  if barrier ~= '' and compareStreamIds(entryId, barrier) < 0 then return 'reappend' end
  return s.count > 0 and 'park' or 'run'
end

-- A schedule member id for a deferral ('' counted in its key's state, 'p' parked, 'n' not counted:
-- deferredOrder 'none'): 'd' and the group's next sequence number, zero-padded, so that entries of
-- one due time release in the order they were scheduled (members of one score sort as strings).
-- Ids written before (stream ids) still release, first among their due time, counted in no key.
-- `seq` the sequence number it takes.
local function deferralId(seq, kind)
  return string.format('d%016d%s', seq, kind)
end

-- deferralId with the group's next sequence number (DEFERRAL_SEQ).
local function nextDeferralId(entriesKey, kind)
  return deferralId(redis.call('HINCRBY', entriesKey, DEFERRAL_SEQ, 1), kind)
end

-- The kind of a schedule member id: '' counted, 'p' parked, anything else not counted.
local function deferralKindOf(id)
  if string.sub(id, 1, 1) ~= 'd' or #id < 17 then return 'n' end
  return string.sub(id, 18)
end

-- The key field of an entry's field list (name, value, ...), as the member's laneOf names it.
local function keyFieldOf(fields)
  local field = '-'
  for i = 1, #fields - 1, 2 do
    if fields[i] == 'k' then field = 'k' .. fields[i + 1] end
  end
  return field
end

-- The admin's schedule changes (dropScheduled-3.lua, makeScheduledDue-3.lua) keep a key's
-- deferral and its parked entries in step. A key's entries in the schedule share one due time (a
-- parked entry takes the key's `due`, its deferral's), so they are found among the entries due at
-- that one time (a millisecond's worth: the scan's bound). Made due at `nowText` in their order
-- (members of one score sort as strings: the sequence), and the key's `due` becomes `now`, so an
-- entry parked after this call comes out right behind them, not at the old time.
-- Returns how many entries of the key were made due (those due already are left as they are).
local function makeKeyDue(schedule, entries, keyStates, field, due, now, nowText)
  local moved = 0
  if tonumber(due) > now then
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', schedule, due, due)) do
      local kind = deferralKindOf(id)
      local packed = (kind == '' or kind == 'p') and redis.call('HGET', entries, id)
      if packed and keyFieldOf(cmsgpack.unpack(packed)) == field then
        redis.call('ZADD', schedule, 'XX', nowText, id)
        moved = moved + 1
      end
    end
  end
  local state = readKeyState(keyStates, field)
  if state.count > 0 and state.due > now then
    state.due = now
    writeKeyState(keyStates, field, state)
  end
  return moved
end

-- The key field of a schedule entry counted in its key's state (a deferral or a parked entry of
-- deferredOrder 'key'): the one kept beside it (KEY_FIELD), else its fields' (an entry scheduled
-- by a version before this one); nil for a delayed entry, one not counted, one without either.
local function countedKeyFieldOf(entries, id)
  local kind = deferralKindOf(id)
  if kind ~= '' and kind ~= 'p' then return nil end
  local kept = redis.call('HGET', entries, id .. KEY_FIELD)
  if kept then return kept end
  local packed = redis.call('HGET', entries, id)
  return packed and keyFieldOf(cmsgpack.unpack(packed)) or nil
end
