--[[
  acceptMove-5: writes a due delayed entry that another shard's owner found routed to this shard
  (releaseDue-8.lua: its key's shard under the shard count now in effect) to the end of this
  shard's stream, once however often it is sent, and only under the routing its source stamped it
  with (docs/runtime.md, Delayed delivery). The second step, its removal from the source's
  schedule, is the source owner's next releaseDue call; a member that dies between the two leaves
  it waiting to move, and the next owner sends it again: answered 'DONE', written once.

  Once per move: the source's move sequence numbers grow, and its owner moves one entry at a time
  in their order, the next only once this one is done, so the highest number taken from a source
  (KEYS[3]) says which moves landed. A resend of an older move (a zombie's, a lost reply's) is 'DONE'
  and writes nothing.

  Only under its stamp: the entry's stamp (the source's routing marker when it was routed: count
  and version) must be this shard's marker too, with this shard writable under it: what a
  producer's write of its key is checked against (SPEC 9.5). A newer resize here refuses it for
  good ('REFUSED': the source stamps it again and routes it anew; no move of that stamp can land
  here any more, versions never go back); a marker not yet written or not yet switched answers
  'WAIT' (the source tries again later, the entry keeps its stamp).

  KEYS[1]  this shard's stream   KEYS[2]  its routing marker (includes/routing.lua)
  KEYS[3]  the moves it took (hash: source shard index -> the highest move sequence number taken)
  KEYS[4], KEYS[5]  this shard's schedule and its entries (includes/schedule.lua): an entry not due
           yet (taken off a shard a shrink removed) waits there for its due time
  ARGV[1]  the source shard's index   ARGV[2] the move sequence number
  ARGV[3]  the stamp's shard count    ARGV[4] the stamp's marker version
  ARGV[5]  this shard's index          ARGV[6] the entry's fields (cmsgpack, as its schedule keeps them)
  ARGV[7]  a shard channel to SPUBLISH on once written, or '' for none (appendEntries-5.lua)
  ARGV[8]  its due time (Redis ms; '' from a version that stamped a due entry without it)

  Output: the new entry's id (its schedule id when not due yet); 'DONE' (taken before); 'REFUSED'; 'WAIT'.
]]
--- @include "includes/time"
--- @include "includes/routing"
--- @include "includes/schedule"

local seq = tonumber(ARGV[2])
local taken = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
if seq <= taken then return 'DONE' end

local m = redis.call('HMGET', KEYS[2], 'version', 'count', 'previous')
if not m[1] then return 'WAIT' end
local version, count = tonumber(m[1]), tonumber(ARGV[3])
if version > tonumber(ARGV[4]) then return 'REFUSED' end
if version < tonumber(ARGV[4]) then return 'WAIT' end
local inEffect, beforeSwitch = routingInEffect(KEYS[2], nowMs)
if inEffect ~= count then
  -- Stamped before this resize's switch and read here after it: refused for good. Stamped after it
  -- and read here before it (another node's clock on a Cluster): not yet.
  if count == tonumber(m[3]) and inEffect == tonumber(m[2]) then return 'REFUSED' end
  return 'WAIT'
end
if tonumber(ARGV[5]) >= inEffect then return 'REFUSED' end

local dueMs = tonumber(ARGV[8])
-- Due, it goes to the stream unless this shard's schedule still holds an entry due no later (its
-- owner slow, or the group's cutover holding this shard): released after it, it would come out of
-- due order. Then it waits in the schedule too, and this shard's owner releases both in due order.
if dueMs and (dueMs > nowMs() or redis.call('ZCOUNT', KEYS[4], 1, dueMs) > 0) then
  -- Not due yet (or behind this shard's due entries): into this shard's schedule with its due time
  -- and the count its key is routed with here, released by this shard's owner when due (and moved
  -- on, should the count change again).
  local seqNow = nextScheduleSeq(KEYS[5], KEYS[2])
  if type(seqNow) == 'table' then return redis.error_reply(tostring(seqNow.err)) end
  local scheduled = string.format('s%016d', seqNow)
  redis.call('HSET', KEYS[5], scheduled, ARGV[6], scheduled .. ROUTED_COUNT, ARGV[3])
  -- Half a millisecond before its due time: ahead of this shard's own entries due then, which were
  -- sent after the switch (its key's were all on the source before it), so it keeps its place in
  -- send order among its key's entries of one due time; due at the same Redis millisecond.
  redis.call('ZADD', KEYS[4], string.format('%.1f', dueMs - 0.5), scheduled)
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
  return scheduled
end
local fields = cmsgpack.unpack(ARGV[6])
local id
if beforeSwitch then
  -- Taken under the count before a switch: its id must be below the switch, as a producer's write
  -- then (appendEntries-5.lua), so it is in the millisecond of the check, not of the XADD.
  id = redis.pcall('XADD', KEYS[1], string.format('%.0f-*', beforeSwitch), unpack(fields))
  -- The stream's last id is later already (its newest entries came in that millisecond or after).
  if type(id) == 'table' and string.find(tostring(id.err), 'equal or smaller', 1, true) then id = nil end
  if type(id) == 'table' then return redis.error_reply(tostring(id.err)) end
end
id = id or redis.call('XADD', KEYS[1], '*', unpack(fields))
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
if ARGV[7] ~= '' then redis.pcall('SPUBLISH', ARGV[7], '') end
return id
