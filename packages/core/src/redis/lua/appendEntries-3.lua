--[[
  appendEntries-3: writes a producer's entries for one shard, in order, if the shard still takes
  writes with the shard count the producer routed them with (SPEC 9.5, docs/resharding.md), at
  most once per write sequence number.

  KEYS[1]  the shard stream        KEYS[2]  the shard's routing marker (includes/routing.lua)
  KEYS[3]  this producer's write log on the shard (hash: write sequence number -> reply JSON)
  ARGV[1]  shardIndex   ARGV[2] the shard count the producer routed with
  ARGV[3]  MAXLEN ~ cap, or '' for none   ARGV[4] the producer's write sequence number on this shard
  ARGV[5]  a shard channel to SPUBLISH on once an entry is written, or '' for none: on a Redis
           Cluster members cannot block on many shards at once and poll them; this wakes them
           (the channel is in the stream's slot: `<stream>:wake`, keys.ts)
  ARGV[6..] the entries, each as its number of field values n, then the n values (field, value, ...)

  Output: { status, shard count in effect (0 when the shard has no marker), error message, id... }
    'OK'       every entry written; the ids follow, in order
    'REROUTE'  nothing written: the shard count in effect at Redis time is not the routed one (or
               the shard is no longer writable); the producer re-routes these entries with it
    'UNROUTED' nothing written: the shard has no routing marker, so this script cannot tell which
               count is in effect (Redis lost its keys, or a stream from before markers); the
               producer reads the metadata again, ensures the markers from it, and re-routes
    'ERROR'    the ids of the entries written before the first write that failed, then nothing:
               the entries after a failure are not attempted, so a retry of the rest keeps order

  A call whose reply was lost is sent again by ioredis after it reconnects
  (autoResendUnfulfilledCommands, its default): the write log answers such a resend with the first
  run's reply and writes nothing, so the entries land once and the producer learns their ids. The
  log keeps the last WRITE_LOG_WINDOW sequence numbers and expires WRITE_LOG_TTL_MS after the
  producer's last write.

  The check runs in the shard's own hash slot, atomically with the writes: once a shrink has
  switched, no producer (however late its request) can land an entry on a removed shard, and
  after a growth none can write a moved key to its old shard. Every shard of a stream has a marker
  from its creation on (createStream writes them), so a shard without one takes no writes: after
  Redis lost every key, a producer whose cached count predates the loss would otherwise split a
  key across the old count's shard and the recreated stream's.
]]
--- @include "includes/time"
--- @include "includes/routing"

local WRITE_LOG_WINDOW = 256
local WRITE_LOG_TTL_MS = 600000

local shardIndex, routedCount, writeSeq = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4])
local earlier = redis.call('HGET', KEYS[3], ARGV[4])
if earlier then return cjson.decode(earlier) end

-- The reply is logged whatever it says: a resend must get the same answer as the first run.
local function logged(reply)
  redis.call('HSET', KEYS[3], ARGV[4], cjson.encode(reply))
  redis.call('HDEL', KEYS[3], tostring(writeSeq - WRITE_LOG_WINDOW))
  redis.call('PEXPIRE', KEYS[3], WRITE_LOG_TTL_MS)
  return reply
end

local inEffect = routingInEffect(KEYS[2], nowMs())
if inEffect == 0 then return logged({ 'UNROUTED', 0, '' }) end
if inEffect ~= routedCount or shardIndex >= inEffect then
  return logged({ 'REROUTE', inEffect, '' })
end

local reply = { 'OK', inEffect, '' }
-- After the writes, whatever the status: members poll the shard at once for what landed.
local function woken(result)
  -- pcall: the entries are written and logged; a publish that fails (a server without sharded
  -- pub/sub) must not turn this reply into an error that says nothing was (the poll finds them).
  if ARGV[5] ~= '' and #result > 3 then redis.pcall('SPUBLISH', ARGV[5], '') end
  return result
end
local i = 6
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
    return woken(logged(reply))
  end
  reply[#reply + 1] = id
  i = i + n + 1
end
return woken(logged(reply))
