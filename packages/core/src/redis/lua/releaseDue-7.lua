--[[
  releaseDue-7: moves a shard's due scheduled entries into its stream, in due order, each one's
  schedule entry removed and its stream entry added in this one script, so an entry is released
  exactly once however many members (of however many groups) try (docs/runtime.md, Delayed
  delivery). Only a current owner of the shard may release: the caller's fencing token of its group
  must be the one stored (a member that lost the shard releases nothing, SPEC 9.2). Due-ness is
  Redis' TIME, never the caller's clock.

  KEYS[1]  the shard stream   KEYS[2]  the caller's group's fencing token on the shard
  KEYS[3]  the shard's schedule (sorted set: schedule id -> due time, Redis ms)
  KEYS[4]  the shard's scheduled entries (hash: schedule id -> fields, cmsgpack; includes/schedule.lua)
  KEYS[5], KEYS[6]  the same for the caller's group's deferred retries and parked entries on the
           shard (deferFenced-5.lua, parkFenced-5.lua): released into the same stream, each carrying
           its group and attempt count (fields `g`, `a`), so that the other groups acknowledge it
           unhandled and the deferring group's count goes on
  KEYS[7]  the caller's group's key states on the shard (includes/keyOrder.lua): each released
           entry counted in its key's state is counted out, and is its key's last released and last
           appended copy; states of keys counting nothing whose last appended copy no entry can be
           below any more (delivered, none pending) are swept
  ARGV[1]  the caller's token   ARGV[2]  the most entries to release (at most MAX_RELEASED)
  ARGV[3]  a shard channel to SPUBLISH on once an entry is released, or '' for none (a Cluster's
           members poll their shards: this wakes them, as appendEntries-5.lua does)
  ARGV[4]  consumerGroup (the barrier sweep reads its last-delivered id and pending entries)

  Output: {released, nextDueInMs, states, swept}: how many entries were released, how long until
  the next scheduled entry is due (0: more are due now, beyond the count; -1: the schedule is
  empty), the new states of the keys this call counted out (keyStateReply, flattened), and the
  key fields whose barrier was swept; {-1} when the caller no longer holds the shard (nothing released).
]]
--- @include "includes/fence"
--- @include "includes/time"
--- @include "includes/compareStreamIds"
--- @include "includes/keyOrder"

-- The most entries one call releases: one call is one script run, Redis does nothing else meanwhile;
-- the rest go in the next call. Each XADD unpacks one entry's fields (at most 12 values).
local MAX_RELEASED = 256
-- Key states one call looks at for barriers to sweep (HSCAN's COUNT hint): a little each call, so
-- the sweep costs a call nothing noticeable, and every stale barrier goes within a few calls.
local SWEPT_PER_CALL = 16

local stream, fence = KEYS[1], KEYS[2]
if not holdsFence(fence, ARGV[1]) then return { -1 } end
local limit = math.min(tonumber(ARGV[2]) or 0, MAX_RELEASED)
local now = nowMs()

local keyStates, consumerGroup = KEYS[7], ARGV[4]
local released, nextDueInMs = 0, -1
-- The key states counted out in this call, by field, written once at the end.
local touched, touchedOrder = {}, {}
for k = 3, 5, 2 do
  local schedule, entries = KEYS[k], KEYS[k + 1]
  local due = limit > released and redis.call('ZRANGEBYSCORE', schedule, '-inf', now, 'LIMIT', 0, limit - released) or {}
  for _, id in ipairs(due) do
    local packed = redis.call('HGET', entries, id)
    -- Each entry is moved whole before the next: should a later XADD fail (OOM), the script stops
    -- with the earlier ones released and this one still scheduled, never both or neither.
    if packed then
      local fields = cmsgpack.unpack(packed)
      local streamId = redis.call('XADD', stream, '*', unpack(fields))
      released = released + 1
      local kind = k == 5 and deferralKindOf(id) or 'n'
      if kind == '' or kind == 'p' then
        local field = keyFieldOf(fields)
        local state = touched[field]
        if not state then
          state = readKeyState(keyStates, field)
          touched[field] = state
          touchedOrder[#touchedOrder + 1] = field
        end
        state.count = math.max(0, state.count - 1)
        if state.floor == '' then state.floor = streamId end
        state.released = streamId
        state.barrier = streamId
        if state.count == 0 then state.partial = 0 end
        -- Written with each entry: should a later one fail, what was released is counted out.
        writeKeyState(keyStates, field, state)
        if kind == 'p' and redis.call('HINCRBY', keyStates, PARKED_COUNT, -1) <= 0 then redis.call('HDEL', keyStates, PARKED_COUNT) end
      end
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

-- Stopped at the bound: a key still counting entries was released in part, the rest due now or
-- next call. Its released copies wait for them (parkFenced-5.lua 'hold') rather than be parked
-- behind them, which would turn the key's order round.
local states = {}
for _, field in ipairs(touchedOrder) do
  local state = touched[field]
  if released >= limit and state.count > 0 then
    state.partial = 1
    writeKeyState(keyStates, field, state)
  end
  for _, value in ipairs(keyStateReply(field, state)) do states[#states + 1] = value end
end

-- The barrier sweep: a barrier is stale once every entry of the shard up to it was delivered to the
-- group and none of them is pending (so none is in a member's buffer, nor ever will be again).
local swept = {}
if redis.call('EXISTS', keyStates) == 1 then
  local lastDelivered
  local groups = redis.pcall('XINFO', 'GROUPS', stream)
  -- A stream or group gone (an error reply): nothing to sweep now.
  if type(groups) ~= 'table' or groups.err then groups = {} end
  for _, info in ipairs(groups) do
    local group = {}
    for i = 1, #info - 1, 2 do group[info[i]] = info[i + 1] end
    if group['name'] == consumerGroup then lastDelivered = group['last-delivered-id'] end
  end
  local pendingSummary = lastDelivered and redis.call('XPENDING', stream, consumerGroup) or { 0 }
  local lowestPending = tonumber(pendingSummary[1]) > 0 and pendingSummary[2] or nil
  local cursor = redis.call('HGET', keyStates, BARRIER_CURSOR) or '0'
  local page = redis.call('HSCAN', keyStates, cursor, 'COUNT', SWEPT_PER_CALL)
  for i = 1, #page[2] - 1, 2 do
    local field = page[2][i]
    if string.sub(field, 1, 1) ~= '#' and not touched[field] and lastDelivered then
      local state = readKeyState(keyStates, field)
      if state.count == 0 and state.barrier ~= '' and compareStreamIds(state.barrier, lastDelivered) <= 0
        and (not lowestPending or compareStreamIds(state.barrier, lowestPending) < 0) then
        redis.call('HDEL', keyStates, field)
        swept[#swept + 1] = field
      end
    end
  end
  if redis.call('HLEN', keyStates) <= 1 and page[1] == '0' then
    redis.call('HDEL', keyStates, BARRIER_CURSOR)
  else
    redis.call('HSET', keyStates, BARRIER_CURSOR, page[1])
  end
end

if released > 0 and ARGV[3] ~= '' then redis.pcall('SPUBLISH', ARGV[3], '') end
return { released, nextDueInMs, states, swept }
