--[[
  ackFencedMany-n: XACK on several shards in one call, each shard only while the caller still holds
  its fencing token. A shard whose token changed is refused on its own; the others are acknowledged.
  Single Redis only (the keys of different shards live in different hash slots).

  KEYS[2i-1]  shard i's stream      KEYS[2i]  shard i's fencing token
  ARGV[1]     consumerGroup
  ARGV[...]   per shard i, in KEYS order: the caller's token, the number of ids n, then n entry ids
  Output: { per shard: the number of entries acknowledged, or -1 when the caller no longer holds it }
]]
--- @include "includes/fence"

local group = ARGV[1]
local out = {}
local at = 2
for i = 1, #KEYS / 2 do
  local token = ARGV[at]
  local n = tonumber(ARGV[at + 1])
  local first = at + 2
  local last = first + n - 1
  at = last + 1
  if not holdsFence(KEYS[2 * i], token) then
    out[i] = -1
  else
    out[i] = redis.call('XACK', KEYS[2 * i - 1], group, unpack(ARGV, first, last))
  end
end
return out
