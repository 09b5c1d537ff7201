--[[
  makeScheduledDue-3: makes scheduled entries due now (CoordinatorAdmin.releaseScheduled, rsc
  schedule release, the testing kit's releaseScheduled): their due time becomes Redis' TIME, so the
  shard's owner releases them into the stream in its next turn (releaseDue-8.lua, fenced: this
  script moves nothing into the stream itself). One entry by id, or the schedule's next `limit` not
  yet due; an entry due already is left as it is (its place among the due ones is kept).
  A deferral and the entries parked behind it (deferredOrder 'key', includes/keyOrder.lua) are made
  due together, in their order: made due alone, its released copy would wait for them until their
  old due time. So one entry by id brings its key's other entries in the schedule with it, and a
  slice ending inside one due time takes the rest of that due time too (a key's entries share one).

  KEYS[1]  the schedule (sorted set: id -> due time, Redis ms)   KEYS[2]  its entries (hash)
  KEYS[3]  the group's key states on the shard (a deferred schedule's; for delayed entries, which
           no key state counts, the schedule's own key: never read)
  ARGV[1]  an entry's id, or '' for the next ARGV[2] entries not yet due (at most MAX_MADE_DUE,
           and the rest of the last one's due time)
  Output: { how many entries were made due now, Redis' clock (ms), the due time the one entry had
  before ('' for none: it is not in the schedule, or ARGV[1] is ''; 'moving' for a delayed entry
  due and waiting to move to its key's shard after a resize), how many other entries of its
  key were made due with it (0 for a slice: they are in its count) }
]]
--- @include "includes/time"
--- @include "includes/schedule"
--- @include "includes/compareStreamIds"
--- @include "includes/keyOrder"

-- One call is one script run: a schedule of a million entries is made due a slice at a time.
local MAX_MADE_DUE = 1000

local schedule, entries, keyStates = KEYS[1], KEYS[2], KEYS[3]
local id = ARGV[1]
local now = nowMs()
local nowText = string.format('%.0f', now)

if id ~= '' then
  local due = redis.call('ZSCORE', schedule, id)
  -- An id in the sorted set without its fields is not an entry (releaseDue-8.lua would drop it).
  if not due or redis.call('HEXISTS', entries, id) == 0 then return { 0, nowText, '', 0 } end
  -- A delayed entry waiting to move to its key's shard (score at or below 0, releaseDue-8.lua): due
  -- already, its score is its move number, not a due time.
  if tonumber(due) <= 0 then return { 0, nowText, 'moving', 0 } end
  if tonumber(due) <= now then return { 0, nowText, due, 0 } end
  local field = countedKeyFieldOf(entries, id)
  if not field then
    redis.call('ZADD', schedule, 'XX', nowText, id)
    return { 1, nowText, due, 0 }
  end
  local moved = makeKeyDue(schedule, entries, keyStates, field, due, now, nowText)
  return { 1, nowText, due, math.max(0, moved - 1) }
end

local limit = math.min(math.max(tonumber(ARGV[2]) or 0, 1), MAX_MADE_DUE)
local later = redis.call('ZRANGEBYSCORE', schedule, '(' .. nowText, '+inf', 'LIMIT', 0, limit, 'WITHSCORES')
local made, lastDue = 0, nil
local fields, fieldOrder = {}, {}
for i = 1, #later - 1, 2 do
  redis.call('ZADD', schedule, 'XX', nowText, later[i])
  made = made + 1
  lastDue = later[i + 1]
  local field = countedKeyFieldOf(entries, later[i])
  if field and not fields[field] then
    fields[field] = true
    fieldOrder[#fieldOrder + 1] = field
  end
end
-- A full slice may end inside one due time, a key's deferral made due without its parked entries.
if made == limit and lastDue then
  for _, rest in ipairs(redis.call('ZRANGEBYSCORE', schedule, lastDue, lastDue)) do
    redis.call('ZADD', schedule, 'XX', nowText, rest)
    made = made + 1
    local field = countedKeyFieldOf(entries, rest)
    if field and not fields[field] then
      fields[field] = true
      fieldOrder[#fieldOrder + 1] = field
    end
  end
end
-- The keys made due: an entry parked after this call takes their new due time, not the old one.
for _, field in ipairs(fieldOrder) do makeKeyDue(schedule, entries, keyStates, field, '0', now, nowText) end
return { made, nowText, '', 0 }
