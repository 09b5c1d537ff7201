--[[
  readScheduleHeads-2: how many entries a shard's two schedules hold and when the first of each is
  due, in one call (describeGroup's per-shard counts, the metrics' gauges): one round trip per shard
  rather than four commands. Read-only.

  KEYS[1]  the shard's schedule (delayed entries; sorted set: id -> due time, Redis ms)
  KEYS[2]  a group's deferred retries on the shard (the same shape)
  Output: { count, first due time or '', count, first due time or '' }, in KEYS order (the first
  due time of the entries with a positive score: one waiting to move is counted, not timed)
]]
local out = {}
for _, schedule in ipairs(KEYS) do
  -- An entry waiting to move to its key's shard after a resize has a score <= 0 (releaseDue-7.lua):
  -- counted, but its score is no due time (a due lag from it would read 56 years).
  local first = redis.call('ZRANGEBYSCORE', schedule, '(0', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  out[#out + 1] = redis.call('ZCARD', schedule)
  out[#out + 1] = first[2] or ''
end
return out
