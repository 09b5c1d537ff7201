--[[
  describeGroup-14: a consistent snapshot of one group for CoordinatorAdmin.describeGroup. Read-only.

  KEYS[1..14]  the group's coordinator keys (includes/groupKeys.lua)
  Output: { streamMeta (flat), groupMeta (flat), members (flat id, JSON), leases (flat id, expiry),
            target (flat id, CSV), owners (flat shard, id), state or '' when the group does not exist,
            Redis' clock in ms (the time a description's due times are compared with) }
]]
--- @include "includes/groupKeys"
--- @include "includes/group"
--- @include "includes/time"

local g = loadGroup(K)
local state = ''
if g then state = groupState(K, g) end
return {
  redis.call('HGETALL', K.streamMeta),
  redis.call('HGETALL', K.groupMeta),
  redis.call('HGETALL', K.members),
  redis.call('ZRANGE', K.leases, 0, -1, 'WITHSCORES'),
  redis.call('HGETALL', K.target),
  redis.call('HGETALL', K.owners),
  state,
  string.format('%.0f', nowMs()),
}
