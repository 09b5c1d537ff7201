--[[
  makeScheduledDue-2: makes scheduled entries due now (CoordinatorAdmin.releaseScheduled, rsc
  schedule release, the testing kit's releaseScheduled): their due time becomes Redis' TIME, so the
  shard's owner releases them into the stream in its next turn (releaseDue-7.lua, fenced: this
  script moves nothing into the stream itself). One entry by id, or the schedule's next `limit` not
  yet due; an entry due already is left as it is (its place among the due ones is kept).

  KEYS[1]  the schedule (sorted set: id -> due time, Redis ms)   KEYS[2]  its entries (hash)
  ARGV[1]  an entry's id, or '' for the next ARGV[2] entries not yet due (at most MAX_MADE_DUE)
  Output: { how many entries were made due now, Redis' clock (ms), the due time the one entry had
  before ('' for none: it is not in the schedule, or ARGV[1] is '') }
]]
--- @include "includes/time"

-- One call is one script run: a schedule of a million entries is made due a slice at a time.
local MAX_MADE_DUE = 1000

local schedule, entries = KEYS[1], KEYS[2]
local id = ARGV[1]
local now = nowMs()
local nowText = string.format('%.0f', now)

if id ~= '' then
  local due = redis.call('ZSCORE', schedule, id)
  -- An id in the sorted set without its fields is not an entry (releaseDue-7.lua would drop it).
  if not due or redis.call('HEXISTS', entries, id) == 0 then return { 0, nowText, '' } end
  if tonumber(due) <= now then return { 0, nowText, due } end
  redis.call('ZADD', schedule, 'XX', nowText, id)
  return { 1, nowText, due }
end

local limit = math.min(math.max(tonumber(ARGV[2]) or 0, 1), MAX_MADE_DUE)
local later = redis.call('ZRANGEBYSCORE', schedule, '(' .. nowText, '+inf', 'LIMIT', 0, limit)
for _, entryId in ipairs(later) do redis.call('ZADD', schedule, 'XX', nowText, entryId) end
return { #later, nowText, '' }
