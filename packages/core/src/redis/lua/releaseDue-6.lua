--[[
  releaseDue-6: moves a shard's due scheduled entries into its stream, in due order, each one's
  schedule entry removed and its stream entry added in this one script, so an entry is released
  exactly once however many members (of however many groups) try (docs/runtime.md, Delayed
  delivery). Only a current owner of the shard may release: the caller's fencing token of its group
  must be the one stored (a member that lost the shard releases nothing, SPEC 9.2). Due-ness is
  Redis' TIME, never the caller's clock.

  KEYS[1]  the shard stream   KEYS[2]  the caller's group's fencing token on the shard
  KEYS[3]  the shard's schedule (sorted set: schedule id -> due time, Redis ms)
  KEYS[4]  the shard's scheduled entries (hash: schedule id -> fields, cmsgpack; includes/schedule.lua)
  KEYS[5], KEYS[6]  the same for the caller's group's deferred retries on the shard (deferFenced-4.lua):
           released into the same stream, each carrying its group and attempt count (fields `g`, `a`),
           so that the other groups acknowledge it unhandled and the deferring group's count goes on
  ARGV[1]  the caller's token   ARGV[2]  the most entries to release (at most MAX_RELEASED)
  ARGV[3]  a shard channel to SPUBLISH on once an entry is released, or '' for none (a Cluster's
           members poll their shards: this wakes them, as appendEntries-5.lua does)

  Output: {released, nextDueInMs}: how many entries were released, and how long until the next
  scheduled entry is due (0: more are due now, beyond the count; -1: the schedule is empty);
  {-1} when the caller no longer holds the shard (nothing released).
]]
--- @include "includes/fence"
--- @include "includes/time"

-- The most entries one call releases: one call is one script run, Redis does nothing else meanwhile;
-- the rest go in the next call. Each XADD unpacks one entry's fields (at most 12 values).
local MAX_RELEASED = 256

local stream, fence = KEYS[1], KEYS[2]
if not holdsFence(fence, ARGV[1]) then return { -1 } end
local limit = math.min(tonumber(ARGV[2]) or 0, MAX_RELEASED)
local now = nowMs()

local released, nextDueInMs = 0, -1
for k = 3, 5, 2 do
  local schedule, entries = KEYS[k], KEYS[k + 1]
  local due = limit > released and redis.call('ZRANGEBYSCORE', schedule, '-inf', now, 'LIMIT', 0, limit - released) or {}
  for _, id in ipairs(due) do
    local packed = redis.call('HGET', entries, id)
    -- Each entry is moved whole before the next: should a later XADD fail (OOM), the script stops
    -- with the earlier ones released and this one still scheduled, never both or neither.
    if packed then
      redis.call('XADD', stream, '*', unpack(cmsgpack.unpack(packed)))
      released = released + 1
    end
    redis.call('ZREM', schedule, id)
    redis.call('HDEL', entries, id)
  end
  local nextDue = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
  if #nextDue > 0 then
    local wait = math.max(0, tonumber(nextDue[2]) - now)
    if nextDueInMs < 0 or wait < nextDueInMs then nextDueInMs = wait end
  end
end
if released > 0 and ARGV[3] ~= '' then redis.pcall('SPUBLISH', ARGV[3], '') end
return { released, nextDueInMs }
