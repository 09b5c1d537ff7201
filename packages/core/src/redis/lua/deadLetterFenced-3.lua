--[[
  deadLetterFenced-3: moves an entry to its shard's dead-letter stream and acknowledges it, only
  while the caller still holds the shard's fencing token (SPEC 9.2: side writes are fenced like
  acks). Both happen or neither: a member whose shard moved writes nothing and acks nothing, and
  the shard's new owner decides about the entry itself.

  KEYS[1]  the shard stream   KEYS[2]  the shard's fencing token   KEYS[3]  the shard's dead-letter stream
  ARGV[1]  consumerGroup      ARGV[2]  the caller's token          ARGV[3]  the entry id
  ARGV[4]  maxLen: keep about this many dead letters (XADD MAXLEN ~, the oldest are dropped); 0 = no limit
  ARGV[5..]  the dead letter's field/value pairs
  Output: the dead letter's id; '' when the entry is no longer pending (a resent call whose first
  run landed: nothing is written twice); -1 when the caller no longer holds the shard.
]]
--- @include "includes/fence"

local stream, fence, deadLetters = KEYS[1], KEYS[2], KEYS[3]
local consumerGroup, token, entryId = ARGV[1], ARGV[2], ARGV[3]
local maxLen = tonumber(ARGV[4])

if not holdsFence(fence, token) then return -1 end
if #redis.call('XPENDING', stream, consumerGroup, entryId, entryId, 1) == 0 then return '' end
-- The XADD goes first: if it fails (WRONGTYPE, OOM) the script stops before the ack, so the entry
-- stays pending and the caller tries again.
local id
if maxLen > 0 then
  id = redis.call('XADD', deadLetters, 'MAXLEN', '~', maxLen, '*', unpack(ARGV, 5))
else
  id = redis.call('XADD', deadLetters, '*', unpack(ARGV, 5))
end
redis.call('XACK', stream, consumerGroup, entryId)
return id
