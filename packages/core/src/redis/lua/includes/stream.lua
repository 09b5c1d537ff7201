-- Stream (shard) metadata of the prefix, shared by every consumer group of it.
local function loadStream(K)
  local v = redis.call('HMGET', K.streamMeta, 'shardCount', 'metadataVersion')
  if not v[1] then return nil end
  return { shardCount = tonumber(v[1]), metadataVersion = tonumber(v[2]), readable = nil }
end

-- The readable set can be large; it is read only when a caller needs it.
local function loadReadable(K, stream)
  stream.readable = redis.call('HGET', K.streamMeta, 'readableShardSet') or ''
  return stream.readable
end
