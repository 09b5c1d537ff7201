--[[
  releaseDue-8: moves a shard's due scheduled entries into its stream, in due order, each one's
  schedule entry removed and its stream entry added in this one script, so an entry is released
  exactly once however many members (of however many groups) try (docs/runtime.md, Delayed
  delivery). Only a current owner of the shard may release: the caller's fencing token of its group
  must be the one stored (a member that lost the shard releases nothing, SPEC 9.2). Due-ness is
  Redis' TIME, never the caller's clock.

  A due entry routed by its key goes where a producer's write of its key would go now: when the
  shard count in effect (the shard's routing marker) is not the one it was routed with, or entries
  before it still wait to move, it is not released here but waits to move, in the schedule with a
  score at or below 0 (includes/schedule.lua: its move sequence number, its stamp). The caller
  routes it (jump hash, which Lua cannot afford per entry) and either writes it to its key's shard
  (acceptMove-5.lua, in that shard's slot, at most once per move sequence number) and reports it
  done, or reports that it stays: both in ARGV[4] of its next call, which removes the one and
  releases the other here, each only while it still waits under the sequence number given.

  KEYS[1]  the shard stream   KEYS[2]  the caller's group's fencing token on the shard
  KEYS[3]  the shard's schedule (sorted set: schedule id -> due time, Redis ms; <= 0: waiting to move)
  KEYS[4]  the shard's scheduled entries (hash: schedule id -> fields, cmsgpack; includes/schedule.lua)
  KEYS[5], KEYS[6]  the same for the caller's group's deferred retries and parked entries on the
           shard (deferFenced-5.lua, parkFenced-5.lua): released into the same stream, each carrying
           its group and attempt count (fields `g`, `a`), so that the other groups acknowledge it
           unhandled and the deferring group's count goes on. They never move to another shard: the
           key order they keep (deferredOrder 'key') is their group's on this shard (docs/runtime.md)
  KEYS[7]  the caller's group's key states on the shard (includes/keyOrder.lua): each released
           entry counted in its key's state is counted out, and is its key's last released and last
           appended copy; states of keys counting nothing whose last appended copy no entry can be
           below any more (delivered, none pending) are swept
  KEYS[8]  the shard's routing marker (includes/routing.lua)
  ARGV[1]  the caller's token   ARGV[2]  the most entries to release (at most MAX_RELEASED)
  ARGV[3]  a shard channel to SPUBLISH on once an entry is released, or '' for none (a Cluster's
           members poll their shards: this wakes them, as appendEntries-5.lua does)
  ARGV[4]  what the caller settled of the entries waiting to move, in move order, space-separated:
           'd<id>:<seq>' written to its key's shard (removed here), 's<id>:<seq>:<count>:<version>'
           its key routes here under that stamp (released here if it is still both its stamp and
           the marker's, stamped again if only its stamp), 'r<id>:<seq>' refused by its key's shard
           for a newer resize (stamped again). The
           first item that does not apply as given ends the list: the rest wait for the next call
  ARGV[5]  this shard's index: once a shrink removed it, its keyed entries not due yet move too
  ARGV[6]  consumerGroup (the barrier sweep reads its last-delivered id and pending entries)
  ARGV[7]  unused (a version before this one held an ordered shrink's surviving shards here for
           its group's cutover; ARGV[8] holds every caller of any group instead)
  ARGV[8]  the bound the shards that gave this shard keys in a resize set ('' for none): only its
           schedule's entries scored below it are released (scheduleBound-2.lua: the first score in
           those shards' schedules, read once each had switched). A key's delayed entry sent before
           the switch waits there until it is released or moved here; its later ones sent here
           after the switch must not enter the stream before it, whichever group's owner releases
           this shard (docs/runtime.md, Delayed delivery). Entries due but held by it are counted
           in the reply (heldDue); the caller reads the bound again and calls again later
  ARGV[9]  the stream metadataVersion the caller's givers were computed from ('' for none): when
           this shard's marker is of a newer one (a resize the caller has not heard of yet), nothing
           of its schedule is released, settled or moved until the caller has read it

  Output: {released, nextDueInMs, states, swept, lost, heldDue, then per entry waiting to move (the first
  MOVES_REPLIED, in move order): id, seq, stamp count, stamp version, key, fields (cmsgpack), due
  time ('' when due)}: how many entries were released, how long until the next scheduled entry is
  due (0: more are due now, beyond the count; -1: the schedule is empty), the new states of the keys
  this call counted out (keyStateReply, flattened), the key fields whose barrier was swept and the
  schedule ids of the group's due entries found without their fields (dropped, counted out);
  {-1} when the caller no longer holds the shard (nothing moved).
]]
--- @include "includes/fence"
--- @include "includes/time"
--- @include "includes/routing"
--- @include "includes/schedule"
--- @include "includes/compareStreamIds"
--- @include "includes/keyOrder"

-- The most entries one call releases: one call is one script run, Redis does nothing else meanwhile;
-- the rest go in the next call. Each XADD unpacks one entry's fields (at most 12 values).
local MAX_RELEASED = 256
-- The most entries waiting to move at once: past it, due keyed entries wait in the schedule (in
-- order) until the caller has moved some; the reply carries MOVES_REPLIED of them.
local MAX_MOVING = 1024
local MOVES_REPLIED = 64
-- Key states one call looks at for barriers to sweep (HSCAN's COUNT hint): a little each call, so
-- the sweep costs a call nothing noticeable, and every stale barrier goes within a few calls.
local SWEPT_PER_CALL = 16

local stream, fence, schedule, entries, marker = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[8]
if not holdsFence(fence, ARGV[1]) then return { -1 } end
local limit = math.min(tonumber(ARGV[2]) or 0, MAX_RELEASED)
local now = nowMs()
local inEffect = routingInEffect(marker, function() return now end)
local markerVersion = redis.call('HGET', marker, 'version') or '0'
-- A caller behind this shard's marker (ARGV[9]) bounds its release by givers of an older history:
-- a resize since may have given this shard keys whose earlier entries wait elsewhere. Nothing of
-- the schedule is released, settled or moved then; the group's deferred retries are released.
local held = ARGV[9] ~= nil and ARGV[9] ~= '' and tonumber(markerVersion) > (tonumber(ARGV[9]) or 0)
local stampNow = inEffect .. ' ' .. markerVersion

local released = 0
-- A schedule score as a due time in whole ms: an entry moved here before it was due scores half a
-- millisecond before its due time (acceptMove-5.lua).
local function wholeMs(score)
  return string.format('%.0f', math.ceil(tonumber(score)))
end
local function forget(schedule, entries, id)
  redis.call('ZREM', schedule, id)
  redis.call('HDEL', entries, id, id .. ROUTED_COUNT, id .. MOVE_STAMP)
end
-- One entry into the stream (fields as given), or Redis' error when its XADD failed (OOM), and the
-- new stream id.
local function xaddFields(fields)
  local id = redis.pcall('XADD', stream, '*', unpack(fields))
  if type(id) == 'table' then return id end
  released = released + 1
  return nil, id
end
local function xadd(packed)
  return (xaddFields(cmsgpack.unpack(packed)))
end
local function release(schedule, entries, id)
  local packed = redis.call('HGET', entries, id)
  local failed = packed and xadd(packed)
  if failed then return failed end
  forget(schedule, entries, id)
end
-- Released entries' schedule entries and fields, removed a call's worth at once (ZREM and HDEL of
-- many are far cheaper than one each); at most MAX_RELEASED ids, so one unpack each.
local function forgetAll(schedule, entries, ids, fields)
  if #ids == 0 then return end
  redis.call('ZREM', schedule, unpack(ids))
  redis.call('HDEL', entries, unpack(fields))
end

-- What the caller settled, in move order; its ids are checked against the schedule, never trusted.
for item in string.gmatch(held and '' or ARGV[4], '%S+') do
  local outcome, id, seq, routedWith = string.match(item, '^([dsr])(s%d+):(%d+)(.*)$')
  if not outcome then break end
  local score = redis.call('ZSCORE', schedule, id)
  if not score or tonumber(score) ~= tonumber(seq) - MOVE_BASE then break end
  local stamp = redis.call('HGET', entries, id .. MOVE_STAMP) or ''
  local count, version = string.match(routedWith, '^:(%d+):(%d+)$')
  -- A stay holds only under the stamp the caller routed it with: stamped again since (another
  -- group's owner settled it under a newer resize, and may have moved it already, keeping its move
  -- number), it is left as it is, listed again with its new stamp.
  if outcome == 's' and (not count or (stamp ~= '' and string.match(stamp, '^%d+ %d+') ~= count .. ' ' .. version)) then break end
  if outcome == 'd' then
    forget(schedule, entries, id)
  elseif outcome == 's' and string.sub(stamp, 1, #stampNow + 1) == stampNow .. ' ' then
    local dueMs = tonumber(string.match(stamp, '^%d+ %d+ (%d+)$') or '')
    if dueMs and dueMs > now then
      -- Not due yet (taken off a removed shard that a resize made the stream's again): back to waiting.
      redis.call('ZADD', schedule, string.format('%.0f', dueMs), id)
      redis.call('HDEL', entries, id .. MOVE_STAMP)
    else
      local failed = release(schedule, entries, id)
      if failed then return redis.error_reply(tostring(failed.err)) end
    end
  else
    -- Refused by its key's shard for a newer resize, or routed here under a count no longer in
    -- effect: routed again under the marker's stamp now, keeping its place (its sequence number)
    -- and its due time.
    redis.call('HSET', entries, id .. MOVE_STAMP, stampNow .. ' ' .. (string.match(stamp, '^%S+ %S+ (%d+)$') or ''))
    break
  end
end

local moving = redis.call('ZCOUNT', schedule, '-inf', 0)
-- Puts an entry in the moves, after those there: its move number, its stamp, and its due time when
-- it is not due yet ('' when it is).
local function toMove(id, dueMs)
  local seq = redis.call('HINCRBY', entries, MOVE_SEQ, 1)
  -- Fresh (the hash was deleted with a retired shard): above every number given before, so that a
  -- key's shard that recorded one (acceptMove-5.lua) takes the new ones.
  if seq == 1 then
    seq = now * 1024
    redis.call('HSET', entries, MOVE_SEQ, string.format('%.0f', seq))
  end
  redis.call('ZADD', schedule, string.format('%.0f', seq - MOVE_BASE), id)
  redis.call('HSET', entries, id .. MOVE_STAMP, stampNow .. ' ' .. dueMs)
  moving = moving + 1
end
-- Below the givers' bound only (ARGV[8]): exclusive, since an entry due at it waits there still.
local bound = tonumber(ARGV[8] or '')
local upTo = (bound and bound <= now) and ('(' .. string.format('%.17g', bound)) or now
local due = not held and limit > released and redis.call('ZRANGEBYSCORE', schedule, 1, upTo, 'LIMIT', 0, limit - released) or {}
local failure
-- Every due entry's fields and routed count in one HMGET (at most 2 * MAX_RELEASED fields): one
-- call per entry fewer, the larger part of a release's cost after the XADD itself.
local wanted = {}
for i = 1, #due do
  local id = due[i]
  wanted[2 * i - 1], wanted[2 * i] = id, id .. ROUTED_COUNT
end
local stored = #due > 0 and redis.call('HMGET', entries, unpack(wanted)) or {}
-- The due entries released before any is moved are the schedule's ranks right after those scored
-- below 1 (waiting to move): removed by rank in one call each (no id looked up), before the first
-- entry is moved (its new score puts it ahead of them) or at the end. One released after that is
-- removed on its own (a schedule being moved is rare and short).
local base, run, runOpen = redis.call('ZCOUNT', schedule, '-inf', '(1'), 0, true
local function forgetRun()
  runOpen = false
  if run == 0 then return end
  redis.call('ZREMRANGEBYRANK', schedule, base, base + run - 1)
  redis.call('HDEL', entries, unpack(wanted, 1, 2 * run))
end
local inEffectText = tostring(inEffect)
-- The hot loop (a release costs per entry): no call but the XADD, no string built.
for i = 1, #due do
  local packed, routed = stored[2 * i - 1], stored[2 * i]
  -- Once one entry waits to move, every keyed one due after it does too: a key's later entry must
  -- not be released before its earlier one has found its shard.
  if routed and inEffect > 0 and (moving > 0 or (routed ~= inEffectText and tonumber(routed) ~= inEffect)) then
    if moving >= MAX_MOVING then break end
    if runOpen then forgetRun() end
    -- Stamped with its due time: its key's shard may still hold entries due before it.
    toMove(due[i], wholeMs(redis.call('ZSCORE', schedule, due[i])))
  else
    -- Each entry is written whole before the next: should an XADD fail (OOM), the script stops
    -- with the earlier ones released (and removed) and this one still scheduled.
    if packed then
      local added = redis.pcall('XADD', stream, '*', unpack(cmsgpack.unpack(packed)))
      if type(added) == 'table' then
        failure = added
        break
      end
      released = released + 1
    end
    if runOpen then
      run = i
    else
      redis.call('ZREM', schedule, due[i])
      redis.call('HDEL', entries, wanted[2 * i - 1], wanted[2 * i])
    end
  end
end
if runOpen then forgetRun() end

-- A shard a shrink removed (no longer writable) has no future of its own: its keyed entries not due
-- yet move to their key's shard now, into its schedule with their due time, rather than hold the
-- shrink's drain until they are due. After the due ones (they come first in move order), a call's
-- worth at a time.
if not failure and not held and inEffect > 0 and tonumber(ARGV[5]) >= inEffect and moving < MAX_MOVING then
  local ahead = redis.call('ZRANGEBYSCORE', schedule, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, math.min(limit, MAX_MOVING - moving))
  for i = 1, #ahead, 2 do
    if redis.call('HEXISTS', entries, ahead[i] .. ROUTED_COUNT) == 1 then toMove(ahead[i], wholeMs(ahead[i + 1])) end
  end
end

local nextDueInMs = -1
local function nextDue(schedule, from)
  local first = redis.call('ZRANGEBYSCORE', schedule, from, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #first > 0 then
    -- Whole ms: a moved entry scores half a millisecond before its due time (acceptMove-5.lua).
    local wait = math.max(0, math.ceil(tonumber(first[2]) - now))
    if nextDueInMs < 0 or wait < nextDueInMs then nextDueInMs = wait end
  end
end

-- The group's deferred retries and parked entries: released here, in due order, each one counted in
-- its key's state (deferredOrder 'key') counted out of it.
local deferred, deferredEntries = KEYS[5], KEYS[6]
local keyStates, consumerGroup = KEYS[7], ARGV[6]
-- The key states counted out in this call, by field, written with each entry and replied at the end.
local touched, touchedOrder = {}, {}
local dueRetries = not failure and limit > released and redis.call('ZRANGEBYSCORE', deferred, '-inf', now, 'LIMIT', 0, limit - released) or {}
local releasedIds, releasedFields = {}, {}
-- Each one's fields and the key field kept beside it (KEY_FIELD): at most 2 * MAX_RELEASED values.
wanted = {}
for i, id in ipairs(dueRetries) do
  wanted[2 * i - 1], wanted[2 * i] = id, id .. KEY_FIELD
end
local storedRetries = #dueRetries > 0 and redis.call('HMGET', deferredEntries, unpack(wanted)) or {}
-- Due entries whose fields were gone (deleted from outside): nothing to release, but each counted
-- in its key's state is counted out all the same (else its key would wait for it for good), and
-- the caller hears of them.
local lost = {}
-- Counts one released (or lost) entry out of its key's state: its stream id, or nil when lost.
local function countOut(id, field, streamId)
  local state = touched[field]
  if not state then
    state = readKeyState(keyStates, field)
    touched[field] = state
    touchedOrder[#touchedOrder + 1] = field
  end
  state.count = math.max(0, state.count - 1)
  if streamId then
    if state.floor == '' then state.floor = streamId end
    state.released = streamId
    state.barrier = streamId
  end
  if state.count == 0 then state.partial = 0 end
  -- Written with each entry: should a later one fail, what was released is counted out.
  writeKeyState(keyStates, field, state)
  if deferralKindOf(id) == 'p' and redis.call('HINCRBY', keyStates, PARKED_COUNT, -1) <= 0 then redis.call('HDEL', keyStates, PARKED_COUNT) end
end
for i, id in ipairs(dueRetries) do
  local packed, kept = storedRetries[2 * i - 1], storedRetries[2 * i]
  local kind = deferralKindOf(id)
  local counted = kind == '' or kind == 'p'
  if packed then
    local fields = cmsgpack.unpack(packed)
    local streamId
    failure, streamId = xaddFields(fields)
    if failure then break end
    if counted then countOut(id, kept or keyFieldOf(fields), streamId) end
  else
    lost[#lost + 1] = id
    if counted and kept then
      countOut(id, kept, nil)
    elseif kind == 'p' and redis.call('HINCRBY', keyStates, PARKED_COUNT, -1) <= 0 then
      redis.call('HDEL', keyStates, PARKED_COUNT)
    end
  end
  releasedIds[#releasedIds + 1] = id
  releasedFields[#releasedFields + 1] = id
  releasedFields[#releasedFields + 1] = id .. KEY_FIELD
end
forgetAll(deferred, deferredEntries, releasedIds, releasedFields)

-- Stopped at the bound (or by a failed XADD): a key still counting entries was released in part,
-- the rest due now or next call. Its released copies wait for them (parkFenced-5.lua 'hold') rather
-- than be parked behind them, which would turn the key's order round.
local states = {}
for _, field in ipairs(touchedOrder) do
  local state = touched[field]
  if (released >= limit or failure) and state.count > 0 then
    state.partial = 1
    writeKeyState(keyStates, field, state)
  end
  for _, value in ipairs(keyStateReply(field, state)) do states[#states + 1] = value end
end

-- The barrier sweep: a barrier is stale once every entry of the shard up to it was delivered to the
-- group and none of them is pending (so none is in a member's buffer, nor ever will be again).
local swept = {}
if not failure and redis.call('EXISTS', keyStates) == 1 then
  local lastDelivered
  local groups = redis.pcall('XINFO', 'GROUPS', stream)
  -- A stream or group gone (an error reply): nothing to sweep now.
  if type(groups) ~= 'table' or groups.err then groups = {} end
  for _, info in ipairs(groups) do
    local group = {}
    for g = 1, #info - 1, 2 do group[info[g]] = info[g + 1] end
    if group['name'] == consumerGroup then lastDelivered = group['last-delivered-id'] end
  end
  local pendingSummary = lastDelivered and redis.call('XPENDING', stream, consumerGroup) or { 0 }
  local lowestPending = tonumber(pendingSummary[1]) > 0 and pendingSummary[2] or nil
  local cursor = redis.call('HGET', keyStates, BARRIER_CURSOR) or '0'
  local page = redis.call('HSCAN', keyStates, cursor, 'COUNT', SWEPT_PER_CALL)
  for p = 1, #page[2] - 1, 2 do
    local field = page[2][p]
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

-- Due but held by the givers' bound: counted, and not timed (when the givers' owners release or
-- move what is before them decides it). The next due time is that of an entry still releasable
-- (below the bound: due now, beyond this call's count) or not due yet.
local heldDue = 0
if not held and bound and bound <= now then
  local from = string.format('%.17g', math.max(1, bound))
  heldDue = redis.call('ZCOUNT', schedule, from, now)
  if heldDue > 0 and redis.call('ZCOUNT', schedule, 1, '(' .. from) == 0 then nextDue(schedule, '(' .. now) else nextDue(schedule, '(0') end
elseif not held then
  nextDue(schedule, '(0')
end
nextDue(deferred, '-inf')
if released > 0 and ARGV[3] ~= '' then redis.pcall('SPUBLISH', ARGV[3], '') end
-- What was released stays released (and removed); the caller hears of the failure and calls again.
if failure then return redis.error_reply(tostring(failure.err)) end

local reply = { released, nextDueInMs, states, swept, lost, heldDue }
if moving > 0 and not held then
  local waiting = redis.call('ZRANGEBYSCORE', schedule, '-inf', 0, 'WITHSCORES', 'LIMIT', 0, MOVES_REPLIED)
  for i = 1, #waiting, 2 do
    local id = waiting[i]
    local packed = redis.call('HGET', entries, id)
    local stamp = redis.call('HGET', entries, id .. MOVE_STAMP) or stampNow
    local fields = packed and cmsgpack.unpack(packed) or {}
    local key
    for f = 1, #fields - 1, 2 do
      if fields[f] == 'k' then key = fields[f + 1] end
    end
    local count, version, dueMs = string.match(stamp, '^(%d+) (%d+) ?(%d*)$')
    reply[#reply + 1] = id
    reply[#reply + 1] = string.format('%.0f', tonumber(waiting[i + 1]) + MOVE_BASE)
    reply[#reply + 1] = tonumber(count or 0)
    reply[#reply + 1] = tonumber(version or 0)
    reply[#reply + 1] = key or ''
    reply[#reply + 1] = packed or ''
    reply[#reply + 1] = dueMs or ''
  end
end
return reply
