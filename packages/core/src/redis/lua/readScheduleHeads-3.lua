--[[
  readScheduleHeads-3: how many entries a shard's two schedules hold and when the first of each is
  due, and how many of the group's are parked, in one call (describeGroup's per-shard counts, the
  metrics' gauges): one round trip per shard rather than five commands. Read-only.

  KEYS[1]  the shard's schedule (delayed entries; sorted set: id -> due time, Redis ms)
  KEYS[2]  a group's deferred retries on the shard (the same shape), its parked entries among them
  KEYS[3]  the group's key states on the shard (includes/keyOrder.lua: its PARKED_COUNT field)
  Output: { count, first due time or '', count, first due time or '', parked count }, the
  schedules in KEYS order (the deferred count includes the parked entries; the first due time of the
  entries with a positive score: one waiting to move is counted, not timed)
]]
--- @include "includes/compareStreamIds"
--- @include "includes/keyOrder"

local out = {}
for k = 1, 2 do
  -- An entry waiting to move to its key's shard after a resize has a score <= 0 (releaseDue-8.lua):
  -- counted, but its score is no due time (a due lag from it would read 56 years).
  local first = redis.call('ZRANGEBYSCORE', KEYS[k], '(0', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  out[#out + 1] = redis.call('ZCARD', KEYS[k])
  out[#out + 1] = first[2] or ''
end
out[#out + 1] = tonumber(redis.call('HGET', KEYS[3], PARKED_COUNT) or '0') or 0
return out
