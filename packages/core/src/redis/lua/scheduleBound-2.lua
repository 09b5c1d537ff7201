--[[
  scheduleBound-2: how far a shard's schedule lets the shards that received its keys in a resize
  release theirs (docs/runtime.md, Delayed delivery, Resharding). A key's delayed entries sent
  before a resize's switch wait in the schedule of the shard it routed to then; those sent after,
  in the schedule of the shard it routes to now. The earlier ones must enter the key's stream first
  (moved when due, or, off a removed shard, as soon as it switched), so the receiving shard releases
  only entries due before the first entry still waiting here. It writes nothing, but goes to the
  master (not registered read-only): a replica behind it could miss an entry and answer too high.

  KEYS[1]  the shard's schedule (includes/schedule.lua)   KEYS[2]  its routing marker (includes/routing.lua)

  Output: { the score of its first entry ('' when empty; at or below 0 when one waits to move),
  1 when the marker's latest count is in effect (0 before its switch, or no marker), the marker's
  version (0: none) }. Once switched, no entry routed with an older count arrives here any more, so
  the first score read then is a lower bound of theirs for good (producers write the new count).
]]
--- @include "includes/time"
--- @include "includes/routing"

local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local m = redis.call('HMGET', KEYS[2], 'count', 'version')
local switched = m[1] and routingInEffect(KEYS[2], nowMs) == tonumber(m[1])
return { first[2] or '', switched and 1 or 0, tonumber(m[2] or '0') or 0 }
