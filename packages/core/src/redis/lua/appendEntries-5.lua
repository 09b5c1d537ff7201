--[[
  appendEntries-5: writes a producer's entries for one shard, in order, if the shard still takes
  writes with the shard count the producer routed them with (SPEC 9.5, docs/resharding.md), at
  most once per write sequence number. A delayed entry goes to the shard's schedule instead of its
  stream (docs/runtime.md, Delayed delivery): releaseDue-6.lua moves it into the stream once due.

  KEYS[1]  the shard stream        KEYS[2]  the shard's routing marker (includes/routing.lua)
  KEYS[3]  this producer's write log on the shard (hash: write sequence number -> reply)
  KEYS[4]  the shard's schedule (sorted set: schedule id -> due time, Redis ms)
  KEYS[5]  the shard's scheduled entries (hash: schedule id -> the entry's fields, cmsgpack; and
           the field SCHEDULE_SEQ, the last schedule id given)
  ARGV[1]  shardIndex   ARGV[2] the shard count the producer routed with
  ARGV[3]  MAXLEN ~ cap, or '' for none   ARGV[4] the producer's write sequence number on this shard
  ARGV[5]  a shard channel to SPUBLISH on once an entry is written, or '' for none: on a Redis
           Cluster members cannot block on many shards at once and poll them; this wakes them
           (the channel is in the stream's slot: `<stream>:wake`, keys.ts)
  ARGV[6..] the entries, each as its order group, its due time, its number of field values n, then
           the n values (field, value, ...). The due time is '' (now), '+<ms>' (that long after this
           script's Redis time) or '@<epoch ms>' (the sender's clock); one not after Redis' now is
           written to the stream at once. An order group is one key's entries in this call (a positive number),
           or 0 for an entry without a key: once an entry of a group failed, the group's later
           entries are not attempted (a key's entry never lands after an earlier one of it failed),
           while the other groups' entries go on.

  Output: one string (what the write log keeps, as it is), lines separated by '\n':
    status, the shard count in effect (0 when the shard has no marker), then for 'OK':
    the outcome of each entry, space-separated: its id; 's<n>@<due ms>' it is scheduled, with its
    schedule id and due time (Redis ms); 'E' its write failed (Redis' error is on
    one line after this one, one line per 'E', in order); 'S' not attempted (an earlier entry of
    its order group failed).
    'OK'       the shard takes these writes: each entry's outcome follows
    'REROUTE'  nothing written: the shard count in effect at Redis time is not the routed one (or
               the shard is no longer writable); the producer re-routes these entries with it
    'UNROUTED' nothing written: the shard has no routing marker, so this script cannot tell which
               count is in effect (Redis lost its keys, or a stream from before markers); the
               producer reads the metadata again, ensures the markers from it, and re-routes

  A call whose reply was lost is sent again by ioredis after it reconnects
  (autoResendUnfulfilledCommands, its default): the write log answers such a resend with the first
  run's reply and writes nothing, so the entries land once and the producer learns their ids. The
  log keeps the last WRITE_LOG_WINDOW sequence numbers (up to WRITE_LOG_PRUNE_EVERY more) and
  expires WRITE_LOG_TTL_MS after the producer's last write.

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

local WRITE_LOG_WINDOW = 256
local WRITE_LOG_TTL_MS = 600000
-- Records that fell out of the window are deleted together every WRITE_LOG_PRUNE_EVERY calls (one
-- HDEL of that many fields, unpacked: a fixed bound far below Lua's), not one per call.
local WRITE_LOG_PRUNE_EVERY = 32

local shardIndex, routedCount, writeSeq = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4])
local earlier = redis.call('HGET', KEYS[3], ARGV[4])
if earlier then return earlier end

-- The reply is logged whatever it says: a resend must get the same answer as the first run. It is
-- one string, kept and returned as it is (no encoding on the way in or out).
local function logged(reply)
  redis.call('HSET', KEYS[3], ARGV[4], reply)
  if writeSeq % WRITE_LOG_PRUNE_EVERY == 0 and writeSeq > WRITE_LOG_WINDOW then
    local old = {}
    for seq = math.max(1, writeSeq - WRITE_LOG_WINDOW - WRITE_LOG_PRUNE_EVERY + 1), writeSeq - WRITE_LOG_WINDOW do
      old[#old + 1] = seq
    end
    redis.call('HDEL', KEYS[3], unpack(old))
  end
  redis.call('PEXPIRE', KEYS[3], WRITE_LOG_TTL_MS)
  return reply
end

local inEffect, beforeSwitch = routingInEffect(KEYS[2], nowMs)
if inEffect == 0 then return logged('UNROUTED\n0') end
if inEffect ~= routedCount or shardIndex >= inEffect then return logged('REROUTE\n' .. inEffect) end

-- XADD's arguments up to '*' are the same for every entry; each entry's values follow them.
local args = { KEYS[1] }
if ARGV[3] ~= '' then args[2], args[3], args[4] = 'MAXLEN', '~', ARGV[3] end
args[#args + 1] = '*'
local fixed = #args
-- Before a switch, the entries get ids in the millisecond of the check (`<ms>-<seq>` after the
-- stream's last id), not '*': an entry routed with the count before a switch must have an id below
-- it (docs/resharding.md: the cutover tells the two apart by it), and a call of many entries runs
-- for a good part of a millisecond, past the switch. A stream whose last id is later already keeps '*'.
local pinnedMs, pinnedSeq
-- pcall: a key that is not a stream keeps '*', and each write fails with Redis' error.
local range = beforeSwitch and redis.pcall('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
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
-- One Redis time for every delayed entry of the call: the delays of one send are measured from one instant.
local scriptNowMs = nowMs()
local outcomes, errors, failedGroups, written = {}, {}, {}, 0
-- An entry's write (to the stream or the schedule) failed with Redis' error `reply`: its order
-- group's later entries are not attempted.
local function failed(group, reply)
  outcomes[#outcomes + 1] = 'E'
  errors[#errors + 1] = (string.gsub(tostring(reply.err), '\n', ' '))
  if group ~= '0' then failedGroups[group] = true end
end
local argc, i = #ARGV, 6
while i <= argc do
  local group, dueSpec, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local dueMs = dueTimeOf(dueSpec, scriptNowMs)
  if group ~= '0' and failedGroups[group] then
    outcomes[#outcomes + 1] = 'S'
  elseif dueMs then
    -- pcall: as for a write, a failed schedule write must still tell which entries landed.
    local scheduled = redis.pcall('HINCRBY', KEYS[5], SCHEDULE_SEQ, 1)
    if type(scheduled) == 'number' then
      local fields = {}
      for f = 1, n do fields[f] = ARGV[i + 2 + f] end
      scheduled = scheduleEntry(KEYS[4], KEYS[5], 's' .. scheduled, dueMs, fields)
    end
    if type(scheduled) == 'table' then
      failed(group, scheduled)
    else
      outcomes[#outcomes + 1] = scheduled .. '@' .. string.format('%.0f', dueMs)
    end
  else
    for f = 1, n do args[fixed + f] = ARGV[i + 2 + f] end
    if pinnedMs then args[fixed] = string.format('%.0f-%.0f', pinnedMs, pinnedSeq) end
    -- pcall: a failed write (OOM on the first write, WRONGTYPE) must still tell which entries landed.
    -- unpack of at most fixed + 8 values: an entry has at most 4 fields (entry-format.ts).
    local id = redis.pcall('XADD', unpack(args, 1, fixed + n))
    if pinnedMs and type(id) == 'table' and string.find(tostring(id.err), 'equal or smaller', 1, true) then
      -- The stream's last id is past its last entry (its newest entries were deleted): '*' from here on.
      pinnedMs, args[fixed] = nil, '*'
      id = redis.pcall('XADD', unpack(args, 1, fixed + n))
    end
    if type(id) == 'table' then
      failed(group, id)
    else
      outcomes[#outcomes + 1] = id
      written = written + 1
      if pinnedMs then pinnedSeq = pinnedSeq + 1 end
    end
  end
  i = i + n + 3
end
local reply = 'OK\n' .. inEffect .. '\n' .. table.concat(outcomes, ' ')
if #errors > 0 then reply = reply .. '\n' .. table.concat(errors, '\n') end
logged(reply)
-- After the writes: members poll the shard at once for what landed. pcall: the entries are written
-- and logged; a publish that fails (a server without sharded pub/sub) must not turn this reply into
-- an error that says nothing was (the poll finds them).
if ARGV[5] ~= '' and written > 0 then redis.pcall('SPUBLISH', ARGV[5], '') end
return reply
