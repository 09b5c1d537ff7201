--[[
  appendEntries-5: writes a producer's entries for one shard, in order, if the shard still takes
  writes with the shard count the producer routed them with (SPEC 9.5, docs/resharding.md), at
  most once per write sequence number. A delayed entry goes to the shard's schedule instead of its
  stream (docs/runtime.md, Delayed delivery): releaseDue-8.lua moves it into the stream once due.

  KEYS[1]  the shard stream        KEYS[2]  the shard's routing marker (includes/routing.lua)
  KEYS[3]  this producer's write log on the shard (a string: its last call's sequence number, '\n',
           that call's reply)
  KEYS[4]  the shard's schedule (sorted set: schedule id -> due time, Redis ms)
  KEYS[5]  the shard's scheduled entries (hash: schedule id -> the entry's fields, cmsgpack; and
           the field SCHEDULE_SEQ, the last schedule id given)
  ARGV[1]  shardIndex   ARGV[2] the shard count the producer routed with
  ARGV[3]  MAXLEN ~ cap, or '' for none   ARGV[4] the producer's write sequence number on this shard
  ARGV[5]  a shard channel to SPUBLISH on once an entry is written, or '' for none: on a Redis
           Cluster members cannot block on many shards at once and poll them; this wakes them
           (the channel is in the stream's slot: `<stream>:wake`, keys.ts)
  ARGV[6]  the entries' layout: one digit per entry, its number of field values n (2 to 8)
  ARGV[7]  the entries' order groups, space-separated, one per entry: one key's entries in this call
           share a positive number, an entry without a key has 0. Once an entry of a group failed,
           the group's later entries are not attempted (a key's entry never lands after an earlier
           one of it failed), while the other groups' entries go on. Read only after a failure.
  ARGV[8]  the entries' due times: '' when no entry of the call is delayed (read no further), else
           space-separated, one per entry: '-' (now), '+<ms>' (that long after this script's Redis
           time) or '@<epoch ms>' (the sender's clock), with a trailing 'k' when the entry was
           routed by its key (its routed count is kept beside it: includes/schedule.lua); one not
           after Redis' now is written to the stream at once, a later one goes to the schedule
           (KEYS[4], KEYS[5])
  ARGV[9..] the entries' field values (field, value, ...), n per entry, in order

  Every argument costs Redis a Lua string and a table slot before the script runs, and again on
  the way into XADD: an entry takes only its field values, the per-entry numbers ride in ARGV[6],
  ARGV[7] and ARGV[8] (docs/benchmarks.md, section 7).

  Output: one string, lines separated by '\n':
    status, the shard count in effect (0 when the shard has no marker), then for 'OK':
    the outcome of each entry, space-separated: its id; 's<n>@<due ms>' it is scheduled, with its
    schedule id ('s' and the 16-digit zero-padded SCHEDULE_SEQ) and due time (Redis ms); 'E' its write failed (Redis' error is on
    one line after this one, one line per 'E', in order); 'S' not attempted (an earlier entry of
    its order group failed).
    'OK'         the shard takes these writes: each entry's outcome follows
    'REROUTE'    nothing written: the shard count in effect at Redis time is not the routed one (or
                 the shard is no longer writable); the producer re-routes these entries with it
    'UNROUTED'   nothing written: the shard has no routing marker, so this script cannot tell which
                 count is in effect (Redis lost its keys, or a stream from before markers); the
                 producer reads the metadata again, ensures the markers from it, and re-routes
    'SUPERSEDED' nothing written now: a resend of a call older than the producer's last one on this
                 shard (below)

  A call whose reply was lost is sent again by ioredis after it reconnects
  (autoResendUnfulfilledCommands, its default): the write log answers such a resend with the first
  run's reply and writes nothing, so the entries land once and the producer learns their ids. The
  log keeps the producer's last call only: a producer has at most one call in flight per shard
  (send-merger.ts), so the only call whose reply it waits for is its latest. An older one was given
  up past its deadline (its entries failed as maybe written, its reply ignored) and its resend came
  in order on the same connection before the later ones, so it ran already: 'SUPERSEDED' writes
  nothing. One string, written with its expiry in one command: the log expires WRITE_LOG_TTL_MS
  after the producer's last call on the shard.

  The check runs in the shard's own hash slot, atomically with the writes: once a shrink has
  switched, no producer (however late its request) can land an entry on a removed shard, and
  after a growth none can write a moved key to its old shard. Every shard of a stream has a marker
  from its creation on (createStream writes them), so a shard without one takes no writes: after
  Redis lost every key, a producer whose cached count predates the loss would otherwise split a
  key across the old count's shard and the recreated stream's.
]]
--- @include "includes/time"
--- @include "includes/routing"
--- @include "includes/schedule"

local WRITE_LOG_TTL_MS = '600000'
local FIRST_VALUE = 9

local writeSeq = ARGV[4]
local earlier = redis.call('GET', KEYS[3])
if earlier then
  local newline = string.find(earlier, '\n', 1, true)
  local loggedSeq = string.sub(earlier, 1, newline - 1)
  if loggedSeq == writeSeq then return string.sub(earlier, newline + 1) end
  -- Compared as decimal strings (no leading zeros): a longer one is larger (no number conversions
  -- on every call; the equal-length comparison is of digits only).
  if #loggedSeq > #writeSeq or (#loggedSeq == #writeSeq and loggedSeq > writeSeq) then return 'SUPERSEDED\n0' end
end

-- The reply is logged whatever it says: a resend must get the same answer as the first run. It is
-- one string, kept and returned as it is (no encoding on the way in or out).
local function logged(reply)
  redis.call('SET', KEYS[3], writeSeq .. '\n' .. reply, 'PX', WRITE_LOG_TTL_MS)
  return reply
end

local inEffect, beforeSwitch = routingInEffect(KEYS[2], nowMs)
if inEffect == 0 then return logged('UNROUTED\n0') end
if inEffect ~= tonumber(ARGV[2]) or tonumber(ARGV[1]) >= inEffect then return logged('REROUTE\n' .. inEffect) end

local stream, cap, layout = KEYS[1], ARGV[3], ARGV[6]
-- Before a switch, the entries get ids in the millisecond of the check (`<ms>-<seq>` after the
-- stream's last id), not '*': an entry routed with the count before a switch must have an id below
-- it (docs/resharding.md: the cutover tells the two apart by it), and a call of many entries runs
-- for a good part of a millisecond, past the switch. A stream whose last id is later already keeps '*'.
local pinnedMs, pinnedSeq
-- pcall: a key that is not a stream keeps '*', and each write fails with Redis' error.
local range = beforeSwitch and redis.pcall('XREVRANGE', stream, '+', '-', 'COUNT', 1)
if range and not range.err then
  local lastMs, lastSeq = -1, -1
  if range[1] then
    local id = range[1][1]
    local dash = string.find(id, '-', 1, true)
    lastMs, lastSeq = tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
  end
  if lastMs < beforeSwitch then
    pinnedMs, pinnedSeq = beforeSwitch, 0
  elseif lastMs == beforeSwitch then
    pinnedMs, pinnedSeq = beforeSwitch, lastSeq + 1
  end
end

-- One XADD of the values ARGV[first..last] (unpacked: at most 8, entry-format.ts), with `id`.
local function xadd(id, first, last)
  if cap == '' then return redis.pcall('XADD', stream, id, unpack(ARGV, first, last)) end
  return redis.pcall('XADD', stream, 'MAXLEN', '~', cap, id, unpack(ARGV, first, last))
end

-- Each entry's due spec, read from ARGV[8] only when some entry of the call is delayed, measured
-- from one Redis time: the delays of one send are measured from one instant.
local dues, scriptNowMs
if ARGV[8] ~= '' then
  dues, scriptNowMs = {}, nowMs()
  for spec in string.gmatch(ARGV[8], '%S+') do dues[#dues + 1] = spec end
end

-- The order group of each entry, read from ARGV[7] after the first failure only.
local groups, failedGroups
local outcomes, errors, written = {}, {}, 0
-- Entry e's write (to the stream or the schedule) failed with Redis' error `reply`: its order
-- group's later entries are not attempted.
local function failed(e, reply)
  outcomes[e] = 'E'
  errors[#errors + 1] = (string.gsub(tostring(reply.err), '\n', ' '))
  if not groups then
    groups, failedGroups = {}, {}
    for g in string.gmatch(ARGV[7], '%d+') do groups[#groups + 1] = g end
  end
  if groups[e] ~= '0' then failedGroups[groups[e]] = true end
end
local first = FIRST_VALUE
for e = 1, #layout do
  local last = first + string.byte(layout, e) - 49 -- '0' is 48: n values end n - 1 after the first
  local group = groups and groups[e]
  local dueMs = dues and dues[e] ~= '-' and dueTimeOf(dues[e], scriptNowMs)
  if group and group ~= '0' and failedGroups[group] then
    outcomes[e] = 'S'
  elseif dueMs then
    -- pcall: as for a write, a failed schedule write must still tell which entries landed.
    local scheduled = nextScheduleSeq(KEYS[5], KEYS[2])
    if type(scheduled) == 'number' then
      -- Zero-padded to a fixed width: the schedule orders entries of one due time by member string
      -- (releaseDue-8.lua), so only then does that order stay the send order past s9.
      scheduled = scheduleEntry(KEYS[4], KEYS[5], string.format('s%016d', scheduled), dueMs, { unpack(ARGV, first, last) })
    end
    if type(scheduled) == 'string' and routedByKey(dues[e]) then
      -- The count it was routed with: when it is due, a key the count then in effect routes
      -- elsewhere is moved there (releaseDue-8.lua). Without it the entry would stay (an old one).
      local noted = redis.pcall('HSET', KEYS[5], scheduled .. ROUTED_COUNT, ARGV[2])
      if type(noted) == 'table' then
        redis.pcall('ZREM', KEYS[4], scheduled)
        redis.pcall('HDEL', KEYS[5], scheduled)
        scheduled = noted
      end
    end
    if type(scheduled) == 'table' then
      failed(e, scheduled)
    else
      outcomes[e] = scheduled .. '@' .. string.format('%.0f', dueMs)
    end
  else
    local id
    if pinnedMs then
      id = xadd(string.format('%.0f-%.0f', pinnedMs, pinnedSeq), first, last)
      if type(id) == 'table' and string.find(tostring(id.err), 'equal or smaller', 1, true) then
        -- The stream's last id is past its last entry (its newest entries were deleted): '*' from here on.
        pinnedMs = nil
        id = xadd('*', first, last)
      end
    else
      -- pcall: a failed write (OOM on the first write, WRONGTYPE) must still tell which entries landed.
      id = xadd('*', first, last)
    end
    if type(id) == 'table' then
      failed(e, id)
    else
      outcomes[e] = id
      written = written + 1
      if pinnedMs then pinnedSeq = pinnedSeq + 1 end
    end
  end
  first = last + 1
end
local reply = 'OK\n' .. ARGV[2] .. '\n' .. table.concat(outcomes, ' ')
if #errors > 0 then reply = reply .. '\n' .. table.concat(errors, '\n') end
logged(reply)
-- After the writes: members poll the shard at once for what landed. pcall: the entries are written
-- and logged; a publish that fails (a server without sharded pub/sub) must not turn this reply into
-- an error that says nothing was (the poll finds them).
if ARGV[5] ~= '' and written > 0 then redis.pcall('SPUBLISH', ARGV[5], '') end
return reply
