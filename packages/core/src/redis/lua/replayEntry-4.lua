--[[
  replayEntry-4: writes a dead letter's entry again (CoordinatorAdmin.replayDeadLetter) to one
  shard, if the shard takes writes with the shard count the caller routed with (the routing check
  of appendEntries-5.lua, SPEC 9.5), and records, in the same script and the shard's own slot, which
  id it got (SPEC 10.6): a record retention does not touch, so that a replay run again after a
  failure (a lost reply, a crash, a delete that failed) finds this write even once the group has
  handled it and `trim` has deleted it, and never writes it twice. A second call for the same dead
  letter on the same shard answers the recorded id and writes nothing. Once the dead letter is
  gone (replayed or purged), its record becomes a tombstone with a TTL (KEYS[4], admin/replay-records.ts):
  a replay whose write was still in flight (an offline queue, a slow link) while a take-over replay
  finished finds it and writes nothing either.

  KEYS[1]  the shard stream        KEYS[2]  the shard's routing marker (includes/routing.lua)
  KEYS[3]  the shard's replay records of the destination (hash: dead-letter ref -> entry id)
  KEYS[4]  this dead letter's tombstone on the shard (the entry id, once the record was retired)
  ARGV[1]  shardIndex   ARGV[2]  the shard count the caller routed with   ARGV[3]  the dead-letter ref
  ARGV[4]  a shard channel to SPUBLISH on once written, or '' (appendEntries-5.lua says why)
  ARGV[5..] the entry's field names and values (a fixed handful: payload, codec, key, headers)

  Output: { 'OK', count in effect, id } written now; { 'EARLIER', count in effect, id } written
  before; { 'REROUTE', count in effect } nothing written, route again with that count;
  { 'UNROUTED', 0 } nothing written, the shard has no routing marker (ensure the markers, retry).
]]
--- @include "includes/time"
--- @include "includes/routing"

local shardIndex, routedCount, ref = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]

local earlier = redis.call('HGET', KEYS[3], ref)
if earlier then return { 'EARLIER', routedCount, earlier } end
local retired = redis.call('GET', KEYS[4])
if retired then return { 'EARLIER', routedCount, retired } end
local inEffect = routingInEffect(KEYS[2], nowMs)
if inEffect == 0 then return { 'UNROUTED', 0 } end
if inEffect ~= routedCount or shardIndex >= inEffect then return { 'REROUTE', inEffect } end

local args = { KEYS[1], '*' }
for i = 5, #ARGV do args[#args + 1] = ARGV[i] end
local id = redis.call('XADD', unpack(args))
redis.call('HSET', KEYS[3], ref, id)
if ARGV[4] ~= '' then redis.pcall('SPUBLISH', ARGV[4], '') end
return { 'OK', inEffect, id }
