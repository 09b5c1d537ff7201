--[[
  ackFenced-2: XACK, only while the caller still holds the shard's fencing token.

  KEYS[1]  the shard stream   KEYS[2]  the shard's fencing token
  ARGV[1]  consumerGroup      ARGV[2]  the caller's token   ARGV[3..]  entry ids
  Output: the number of entries acknowledged, or -1 when the caller no longer holds the shard.
]]
--- @include "includes/fence"
--- @include "includes/callInChunks"

if not holdsFence(KEYS[2], ARGV[2]) then return -1 end
-- A batch handler's ids, or every entry finished in one turn: as many as a user lets run at once.
return callInChunks({ 'XACK', KEYS[1], ARGV[1] }, ARGV, 3)
