-- A shard's schedule (docs/runtime.md, Delayed delivery): a sorted set (schedule id -> due time in
-- Redis ms) and a hash (schedule id -> the entry's fields packed with cmsgpack, binary-safe), both
-- in the shard stream's hash slot (keys.ts shardSchedule), so a write schedules and a release moves
-- an entry atomically with the stream. The hash also keeps SCHEDULE_SEQ, the last schedule id given.
local SCHEDULE_SEQ = '#seq'

-- The due time (Redis ms) of a due spec ('+<ms>' after `now`, '@<epoch ms>'), or nil when the
-- entry is due now ('' or a time not after `now`): it is written to the stream at once.
local function dueTimeOf(spec, now)
  if spec == '' then return nil end
  local value = tonumber(string.sub(spec, 2))
  if not value then return nil end
  local due = string.sub(spec, 1, 1) == '+' and now + value or value
  if due <= now then return nil end
  return due
end

-- Adds one entry to a schedule: its id, or Redis' error (a table with err) when a write failed,
-- leaving nothing of it behind. pcall: a failed write (OOM, WRONGTYPE) is the entry's, not the call's.
local function scheduleEntry(scheduleKey, entriesKey, id, dueMs, fields)
  local stored = redis.pcall('HSET', entriesKey, id, cmsgpack.pack(fields))
  if type(stored) == 'table' then return stored end
  local added = redis.pcall('ZADD', scheduleKey, string.format('%.0f', dueMs), id)
  if type(added) == 'table' then
    redis.pcall('HDEL', entriesKey, id)
    return added
  end
  return id
end
