-- A group's incarnation: Redis TIME in microseconds when the group was created, as a decimal string
-- (16 digits, exact as a Lua number). A group recreated after its keys were lost gets a larger one,
-- so fencing tokens of its former life ("<incarnation>:<epoch>:<memberId>", claimShard-2.lua) are
-- always older than any token of the new one, whatever the epochs (SPEC 9.3).
local function assignIncarnation(K, g)
  local t = redis.call('TIME')
  g.incarnation = t[1] .. string.format('%06d', tonumber(t[2]))
  redis.call('HSET', K.groupMeta, 'incarnation', g.incarnation)
end
