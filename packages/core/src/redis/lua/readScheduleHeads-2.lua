--[[
  readScheduleHeads-2: how many entries a shard's two schedules hold and when the first of each is
  due, in one call (describeGroup's per-shard counts, the metrics' gauges): one round trip per shard
  rather than four commands. Read-only.

  KEYS[1]  the shard's schedule (delayed entries; sorted set: id -> due time, Redis ms)
  KEYS[2]  a group's deferred retries on the shard (the same shape)
  Output: { count, first due time or '', count, first due time or '' }, in KEYS order
]]
local out = {}
for _, schedule in ipairs(KEYS) do
  local first = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
  out[#out + 1] = redis.call('ZCARD', schedule)
  out[#out + 1] = first[2] or ''
end
return out
