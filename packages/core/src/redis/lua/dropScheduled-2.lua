--[[
  dropScheduled-2: removes one entry from a schedule (a shard's delayed entries, or a group's
  deferred retries on it) and its fields, together (CoordinatorAdmin.dropScheduled, rsc schedule
  drop): it is never released. Dropping what is gone changes nothing, so it is safe to run twice.

  KEYS[1]  the schedule (sorted set: id -> due time, Redis ms)   KEYS[2]  its entries (hash)
  ARGV[1]  the entry's id
  Output: { 1 when it was dropped now, 0 when it was not there; the due time it had, or '' }
]]
local schedule, entries = KEYS[1], KEYS[2]
local id = ARGV[1]

local due = redis.call('ZSCORE', schedule, id)
redis.call('ZREM', schedule, id)
local removed = redis.call('HDEL', entries, id)
-- PARKING HOOK: a deferred retry that parks its key's later entries (deferredOrder: 'key') would
-- have to unpark them here, in this same script, or they wait for a release that never comes.
-- Nothing else counts a scheduled entry today (describeGroup counts the sorted set itself).
if due then return { 1, due } end
return { removed, '' }
