--[[
  endShardRetirement-1: the last step of CoordinatorAdmin.deleteDrainedShards, in the coordinator's
  slot: ends the retiring record that retireShards-n.lua wrote, if it is still the one the caller
  worked on. 'deleted': every retired shard's keys are gone (deleteRetiredShard-n.lua confirmed
  each); the record is dropped and resizes may go on. 'kept': a retired shard still holds entries a
  group has not processed; the shards go back into the stream's span (describeGroup and trim see
  them again, SPEC 9.6) and the record is dropped, so that the stream can still be resized.

  KEYS[1]  the stream's metadata hash
  ARGV[1]  the retiredVersion the caller worked on   ARGV[2]  'deleted' or 'kept'
  Output: 1 when the record was ended now, 0 when it was not there (ended by another call).
]]
local meta = redis.call('HMGET', KEYS[1], 'retiredVersion', 'retiringSpan', 'shardSpan', 'shardCount')
if meta[1] ~= ARGV[1] then return 0 end
if ARGV[2] == 'kept' then
  local span = math.max(tonumber(meta[2]) or 0, tonumber(meta[3]) or 0, tonumber(meta[4]) or 0)
  redis.call('HSET', KEYS[1], 'shardSpan', span)
end
redis.call('HDEL', KEYS[1], 'retiringSpan', 'retiredVersion')
return 1
