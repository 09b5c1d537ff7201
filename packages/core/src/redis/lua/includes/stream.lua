-- Stream (shard) metadata of the prefix, shared by every consumer group of it, seen by one group.
--
-- shardCount    shards producers write to now (0..shardCount-1)
-- shardSpan     1 + the highest shard index that may still hold entries (> shardCount while shards
--               removed by a shrink drain); shard indices in requests are checked against it
-- readable      the group's readable shard set: its own `readableShardSet` while a resize is in
--               progress for it (docs/resharding.md), else 0..shardCount-1 (readableIsFullRange)
local function loadStream(K)
  local v = redis.call('HMGET', K.streamMeta, 'shardCount', 'metadataVersion', 'shardSpan')
  if not v[1] then return nil end
  local count = tonumber(v[1])
  local groupReadable = redis.call('HGET', K.groupMeta, 'readableShardSet')
  return {
    count = count,
    shardCount = math.max(count, tonumber(v[3]) or count),
    metadataVersion = tonumber(v[2]),
    readableIsFullRange = not groupReadable,
    readable = groupReadable or nil,
  }
end

-- The full range is built only when a caller needs it as a list.
local function loadReadable(K, stream)
  stream.readable = stream.readable or rangeCsv(stream.count)
  return stream.readable
end
