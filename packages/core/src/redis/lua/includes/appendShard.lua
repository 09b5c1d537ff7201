-- A producer's write of one shard's entries (appendEntries-5.lua, where KEYS and ARGV are
-- described): the body of that script, and of appendEntriesMany-n.lua's function for each of its
-- shards. Expects includes/time, includes/routing and includes/schedule; returns the reply.
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
local first, from, count = FIRST_VALUE, 1, #layout
-- The common call (no entry delayed, ids not pinned, no cap): one XADD per entry and nothing else
-- until one fails; the loop below takes the rest from there. A sent entry costs Redis about 1,500
-- instructions less than through the general loop (callgrind, docs/benchmarks.md section 7).
if not dues and not pinnedMs and cap == '' then
  while from <= count do
    local last = first + string.byte(layout, from) - 49
    local id = redis.pcall('XADD', stream, '*', unpack(ARGV, first, last))
    first = last + 1
    if type(id) == 'table' then
      failed(from, id)
      from = from + 1
      break
    end
    outcomes[from] = id
    written = written + 1
    from = from + 1
  end
end
for e = from, count do
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
