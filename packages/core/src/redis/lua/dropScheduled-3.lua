--[[
  dropScheduled-3: removes one entry from a schedule (a shard's delayed entries, or a group's
  deferred retries and parked entries on it) and its fields, together (CoordinatorAdmin.dropScheduled,
  rsc schedule drop): it is never released. Dropping what is gone changes nothing, so it is safe to
  run twice.
  An entry counted in its key's state (deferredOrder 'key': a deferral, or an entry parked behind
  it; includes/keyOrder.lua) is counted out of it here, as its release would (releaseDue-8.lua), or
  its key would wait for it for good. A dropped deferral's parked entries waited only for it: they
  are made due now, in their order (makeKeyDue), and the key's later entries park right behind them;
  nothing else of the key is lost or reordered.

  KEYS[1]  the schedule (sorted set: id -> due time, Redis ms)   KEYS[2]  its entries (hash)
  KEYS[3]  the group's key states on the shard (a deferred schedule's; for delayed entries, which
           no key state counts, the schedule's own key: never read)
  ARGV[1]  the entry's id
  Output: { 1 when it was dropped now, 0 when it was not there, -1 when it is a delayed entry
  waiting to move to its key's shard (releaseDue-8.lua: refused, nothing changed); the due time it
  had, or ''; how many of its key's parked entries were made due now }
]]
--- @include "includes/time"
--- @include "includes/schedule"
--- @include "includes/compareStreamIds"
--- @include "includes/keyOrder"

local schedule, entries, keyStates = KEYS[1], KEYS[2], KEYS[3]
local id = ARGV[1]

local due = redis.call('ZSCORE', schedule, id)
-- A delayed entry waiting to move (score at or below 0, releaseDue-8.lua) is being written to its
-- key's shard, maybe at this moment: dropping it here could not undo that. Refused, nothing changed.
if due and tonumber(due) <= 0 then return { -1, '', 0 } end
local field = due and countedKeyFieldOf(entries, id)
redis.call('ZREM', schedule, id)
local removed = math.min(1, redis.call('HDEL', entries, id, id .. KEY_FIELD, id .. ROUTED_COUNT, id .. MOVE_STAMP))
local madeDue = 0
if field then
  local state = readKeyState(keyStates, field)
  state.count = math.max(0, state.count - 1)
  if state.count == 0 then state.partial = 0 end
  writeKeyState(keyStates, field, state)
  if deferralKindOf(id) == 'p' then
    if redis.call('HINCRBY', keyStates, PARKED_COUNT, -1) <= 0 then redis.call('HDEL', keyStates, PARKED_COUNT) end
  elseif state.count > 0 then
    local now = nowMs()
    madeDue = makeKeyDue(schedule, entries, keyStates, field, due, now, string.format('%.0f', now))
  end
end
if due then return { 1, due, madeDue } end
return { removed, '', 0 }
