--[[
  readSchedule-2: one page of a schedule for CoordinatorAdmin.readSchedule (rsc schedule list, the
  testing kit): a shard's delayed entries, or one group's deferred retries on it, in due order (ids
  of one due time in id order, as releaseDue-8.lua releases them). Read-only.

  KEYS[1]  the schedule (sorted set: id -> due time, Redis ms)
  KEYS[2]  its entries (hash: id -> fields, cmsgpack; includes/schedule.lua)
  ARGV[1]  the due time of the last entry of the previous page, or '' for the first page
  ARGV[2]  the id of that entry, or ''   ARGV[3]  the most entries to return (at most MAX_PAGE)
  Output: { total entries in the schedule, Redis' clock (ms), { id, due time, { fields } } ... }.
  An entry whose fields are missing (written by other code) has an empty field list.
]]
--- @include "includes/time"

-- One page is one script run, Redis does nothing else meanwhile; each entry's fields are at most
-- 12 values (deferFenced-5.lua, appendEntries-5.lua; a parked entry 14: parkFenced-5.lua), so a page is at most this many of them.
local MAX_PAGE = 1000

local schedule, entries = KEYS[1], KEYS[2]
local afterDue, afterId = ARGV[1], ARGV[2]
local count = math.min(math.max(tonumber(ARGV[3]) or 0, 1), MAX_PAGE)

local page
local rank = afterId ~= '' and redis.call('ZRANK', schedule, afterId) or false
if rank and redis.call('ZSCORE', schedule, afterId) == afterDue then
  page = redis.call('ZRANGE', schedule, rank + 1, rank + count, 'WITHSCORES')
elseif afterId ~= '' then
  -- The previous page's last entry is gone (released or dropped since): go on from its due time.
  -- Released entries go in due order, so what had the same due time and an earlier id is gone
  -- too; after a drop, such entries are listed again (never skipped).
  page = redis.call('ZRANGEBYSCORE', schedule, afterDue, '+inf', 'WITHSCORES', 'LIMIT', 0, count)
else
  page = redis.call('ZRANGE', schedule, 0, count - 1, 'WITHSCORES')
end

local out = { redis.call('ZCARD', schedule), string.format('%.0f', nowMs()) }
for i = 1, #page, 2 do
  local packed = redis.call('HGET', entries, page[i])
  out[#out + 1] = { page[i], page[i + 1], packed and cmsgpack.unpack(packed) or {} }
end
return out
