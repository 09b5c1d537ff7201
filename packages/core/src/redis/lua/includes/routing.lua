-- The shard count in effect at Redis time (`now()`, asked only while the marker's count and the
-- previous one differ: otherwise the time cannot matter) by a shard's routing marker (a hash in the shard's
-- own hash slot: count, previous, switchAt, version, written by CoordinatorAdmin.resizeShards with
-- ensureRouting-1.lua, from createStream on), or 0 when the shard has no marker: Redis lost its keys,
-- or the stream predates markers; either way no write can be checked until the marker is ensured.
-- Second result: the Redis time of the check while a resize is due and has not switched yet.
-- switchAt is read only while a resize is pending: every field HMGET reads costs a script call of
-- one entry about 3,000 instructions (callgrind, docs/benchmarks.md section 7), and this runs on
-- every producer write.
local function routingInEffect(markerKey, now)
  local m = redis.call('HMGET', markerKey, 'count', 'previous')
  if not m[1] then return 0 end
  if m[2] == m[1] then return tonumber(m[1]) end
  local t = now()
  if t < tonumber(redis.call('HGET', markerKey, 'switchAt')) then return tonumber(m[2]), t end
  return tonumber(m[1])
end
