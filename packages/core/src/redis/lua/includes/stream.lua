-- Stream (shard) metadata of the prefix, shared by every consumer group of it.
local function loadStream(K)
  local v = redis.call('HMGET', K.streamMeta, 'shardCount', 'metadataVersion', 'readableIsFullRange')
  if not v[1] then return nil end
  -- readableIsFullRange: readable = 0..shardCount-1, so checks need no set (no resize in progress)
  return { shardCount = tonumber(v[1]), metadataVersion = tonumber(v[2]), readableIsFullRange = v[3] == '1', readable = nil }
end

-- The readable set can be large; it is read only when a caller needs it.
local function loadReadable(K, stream)
  stream.readable = redis.call('HGET', K.streamMeta, 'readableShardSet') or ''
  return stream.readable
end
