--[[
  ackFencedMany-n: XACK on several shards in one call, each shard only while the caller still holds
  its fencing token. A shard whose token changed is refused on its own; the others are acknowledged.
  A shard whose XACK fails (its key is not a stream, say) is reported on its own too, and the others
  go on: a script is not undone by an error, so failing the call would hide the shards it already
  acknowledged. Single Redis only (the keys of different shards live in different hash slots).

  KEYS[2i-1]  shard i's stream      KEYS[2i]  shard i's fencing token
  ARGV[1]     consumerGroup
  ARGV[...]   per shard i, in KEYS order: the caller's token, the number of ids n, then n entry ids
  Output: { per shard: the number of entries acknowledged; -1 when the caller no longer holds it;
  or the error its XACK raised, as a string (some of its ids may be acknowledged, none is sure) }
]]
--- @include "includes/fence"
--- @include "includes/callInChunks"

local group = ARGV[1]

local function ackShard(i, token, first, last)
  if not holdsFence(KEYS[2 * i], token) then return -1 end
  return callInChunks({ 'XACK', KEYS[2 * i - 1], group }, ARGV, first, last)
end

local out = {}
local at = 2
for i = 1, #KEYS / 2 do
  local token = ARGV[at]
  local n = tonumber(ARGV[at + 1])
  local first = at + 2
  local last = first + n - 1
  at = last + 1
  local ok, result = pcall(ackShard, i, token, first, last)
  -- redis.call raises a table { err = message } (a string before Redis 7).
  if ok then out[i] = result else out[i] = type(result) == 'table' and tostring(result.err) or tostring(result) end
end
return out
