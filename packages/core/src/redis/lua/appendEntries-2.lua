--[[
  appendEntries-2: writes a producer's entries for one shard, in order, if the shard still takes
  writes with the shard count the producer routed them with (SPEC 9.5, docs/resharding.md).

  KEYS[1]  the shard stream        KEYS[2]  the shard's routing marker (includes/routing.lua)
  ARGV[1]  shardIndex   ARGV[2] the shard count the producer routed with
  ARGV[3]  MAXLEN ~ cap, or '' for none
  ARGV[4..] the entries, each as its number of field values n, then the n values (field, value, ...)

  Output: { status, shard count in effect (0 when the shard has no marker), error message, id... }
    'OK'       every entry written; the ids follow, in order
    'REROUTE'  nothing written: the shard count in effect at Redis time is not the routed one (or
               the shard is no longer writable); the producer re-routes these entries with it
    'ERROR'    the ids of the entries written before the first write that failed, then nothing:
               the entries after a failure are not attempted, so a retry of the rest keeps order

  The check runs in the shard's own hash slot, atomically with the writes: once a shrink has
  switched, no producer (however late its request) can land an entry on a removed shard, and
  after a growth none can write a moved key to its old shard.
]]
--- @include "includes/time"
--- @include "includes/routing"

local shardIndex, routedCount = tonumber(ARGV[1]), tonumber(ARGV[2])
local inEffect = routingInEffect(KEYS[2], nowMs())
if inEffect > 0 and (inEffect ~= routedCount or shardIndex >= inEffect) then
  return { 'REROUTE', inEffect, '' }
end

local reply = { 'OK', inEffect, '' }
local i = 4
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local args = { KEYS[1] }
  if ARGV[3] ~= '' then
    args[#args + 1], args[#args + 2], args[#args + 3] = 'MAXLEN', '~', ARGV[3]
  end
  args[#args + 1] = '*'
  for f = 1, n do args[#args + 1] = ARGV[i + f] end
  -- pcall: a failed write (OOM on the first write, WRONGTYPE) must still tell which entries landed.
  local id = redis.pcall('XADD', unpack(args))
  if type(id) == 'table' and id.err then
    reply[1], reply[3] = 'ERROR', id.err
    return reply
  end
  reply[#reply + 1] = id
  i = i + n + 1
end
return reply
