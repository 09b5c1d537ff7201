-- A shard's schedule (docs/runtime.md, Delayed delivery): a sorted set (schedule id -> due time in
-- Redis ms) and a hash (schedule id -> the entry's fields packed with cmsgpack, binary-safe), both
-- in the shard stream's hash slot (keys.ts shardSchedule), so a write schedules and a release moves
-- an entry atomically with the stream. The hash also keeps SCHEDULE_SEQ, the last schedule id given.
local SCHEDULE_SEQ = '#seq'
-- The shard routing marker's field (includes/routing.lua) that keeps the last schedule id given once
-- deleteRetiredShard-n.lua deleted the hash (the marker stays): a shard grown back goes on after it,
-- so that an id `send` answered never names another entry of the shard (a drop by it drops nothing).
local MARKER_SCHEDULE_SEQ = 'scheduleSeq'

-- The next schedule sequence number (SCHEDULE_SEQ), after the one the marker kept when the hash is
-- fresh; or Redis' error (a table with err) when the write failed. pcall: a failed write (OOM) is
-- the entry's, not the call's.
local function nextScheduleSeq(entriesKey, markerKey)
  local seq = redis.pcall('HINCRBY', entriesKey, SCHEDULE_SEQ, 1)
  if seq ~= 1 then return seq end
  local kept = tonumber(redis.call('HGET', markerKey, MARKER_SCHEDULE_SEQ) or '')
  if not kept then return seq end
  local stored = redis.pcall('HSET', entriesKey, SCHEDULE_SEQ, string.format('%.0f', kept + 1))
  if type(stored) == 'table' then return stored end
  return kept + 1
end

-- The field beside a scheduled entry (`<schedule id>:c`) that keeps the shard count its key was
-- routed with (a due spec ending in 'k': the producer routed it by its key, not by an explicit
-- shardIndex). releaseDue-8.lua compares it with the count in effect when the entry is due: a key
-- the count then routes elsewhere is moved to its shard (docs/runtime.md, Delayed delivery).
local ROUTED_COUNT = ':c'
-- The field that stamps an entry waiting to move (`<schedule id>:m`): '<count> <version> <due>', the
-- source's routing marker when it was (last) routed; acceptMove-5.lua takes it only under that.
local MOVE_STAMP = ':m'
-- The field beside a group's deferral or parked entry counted in its key's state (`<schedule id>:k`,
-- in the group's deferred entries hash): its key field (includes/keyOrder.lua), so that it is counted
-- out of its key even when its fields are gone (deleted from outside), rather than hold the key for good.
local KEY_FIELD = ':k'
-- The hash field of the last move sequence number given (releaseDue-8.lua).
local MOVE_SEQ = '#move'
-- An entry waiting to move keeps its place in the schedule with a score at or below 0 (its move
-- sequence number less MOVE_BASE): the schedule's ZCARD, hence describeGroup, a shrink's drain and
-- deleteDrainedShards, still counts it, and it sorts before every due time, in move order.
local MOVE_BASE = 9007199254740992

-- Whether a due spec is of an entry routed by its key (a trailing 'k').
local function routedByKey(spec)
  return string.sub(spec, -1) == 'k'
end

-- The due time (Redis ms) of a due spec ('+<ms>' after `now`, '@<epoch ms>', either with a trailing
-- 'k' when routed by its key), or nil when the entry is due now ('' or a time not after `now`): it
-- is written to the stream at once.
local function dueTimeOf(spec, now)
  if spec == '' then return nil end
  if routedByKey(spec) then spec = string.sub(spec, 1, -2) end
  local value = tonumber(string.sub(spec, 2))
  if not value then return nil end
  local due = string.sub(spec, 1, 1) == '+' and now + value or value
  if due <= now then return nil end
  return due
end

-- Adds one entry to a schedule, its fields packed (cmsgpack, or as packFields packs them: the same
-- bytes): its id, or Redis' error (a table with err) when a write failed, leaving nothing of it
-- behind. pcall: a failed write (OOM, WRONGTYPE) is the entry's, not the call's.
-- `keyField` (optional): the key field it is counted in, kept beside it (KEY_FIELD).
local function schedulePacked(scheduleKey, entriesKey, id, dueMs, packed, keyField)
  local stored
  if keyField then
    stored = redis.pcall('HSET', entriesKey, id, packed, id .. KEY_FIELD, keyField)
  else
    stored = redis.pcall('HSET', entriesKey, id, packed)
  end
  if type(stored) == 'table' then return stored end
  local added = redis.pcall('ZADD', scheduleKey, string.format('%.0f', dueMs), id)
  if type(added) == 'table' then
    redis.pcall('HDEL', entriesKey, id, id .. KEY_FIELD)
    return added
  end
  return id
end

-- schedulePacked with the fields as a list (packed here).
local function scheduleEntry(scheduleKey, entriesKey, id, dueMs, fields, keyField)
  return schedulePacked(scheduleKey, entriesKey, id, dueMs, cmsgpack.pack(fields), keyField)
end

-- Whether `packed` is a packed list of at most `max` values (max < 16: a msgpack fixarray): the
-- bound on what a caller may schedule, as the fields of an entry and its deferral are counted;
-- else the error to answer.
local function boundedPacked(packed, max, script)
  local head = string.byte(packed or '', 1) or 0
  local count = (head >= 0x90 and head <= 0x9f) and (head - 0x90) or nil
  if not count or count > max then
    return nil, redis.error_reply(string.format('%s: at most %d field values, packed, got %s', script, max, count and tostring(count) or 'something else'))
  end
  return packed
end
