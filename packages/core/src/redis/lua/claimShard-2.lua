--[[
  claimShard-2: a member that was granted a shard installs its fencing token, unless a newer
  owner's token is already there (then this grant is stale and the member must not read the shard),
  and makes sure the group's consumer group exists on the shard stream.

  KEYS[1]  the shard's fencing token (string)   KEYS[2]  the shard stream
  ARGV[1]  consumerGroup   ARGV[2]  token "<incarnation>:<grantEpoch>:<memberId>"
  Output: { 1, last-delivered id of the group on the shard } when installed, { 0, current token }
  when a newer owner holds the shard. The new owner reads on from that id; an entry after it that
  it did not read itself was taken by someone else's late read (see firstAfter-n.lua).

  Newer means (incarnation, epoch) compared in that order (SPEC 9.3): a group recreated after its
  keys were lost restarts its epochs but has a larger incarnation, so the tokens of its former life
  neither block it nor ever win against it.
]]
--- @include "includes/fenceToken"

local incarnation, epoch = parseFenceToken(ARGV[2])
if not incarnation then return redis.error_reply('claimShard: malformed fencing token "' .. ARGV[2] .. '"') end
local current = redis.call('GET', KEYS[1])
if current then
  local currentIncarnation, currentEpoch = parseFenceToken(current)
  if currentIncarnation and (currentIncarnation > incarnation or (currentIncarnation == incarnation and currentEpoch > epoch)) then
    return { 0, current }
  end
end
redis.call('SET', KEYS[1], ARGV[2])
-- '0': a group created now reads everything already in the stream, so nothing written before
-- the first member arrived is skipped.
local created = redis.pcall('XGROUP', 'CREATE', KEYS[2], ARGV[1], '0', 'MKSTREAM')
if type(created) == 'table' and created.err and not string.find(created.err, 'BUSYGROUP', 1, true) then
  return redis.error_reply(created.err)
end
for _, info in ipairs(redis.call('XINFO', 'GROUPS', KEYS[2])) do
  for i = 1, #info, 2 do
    if info[i] == 'name' and info[i + 1] == ARGV[1] then
      for j = 1, #info, 2 do
        if info[j] == 'last-delivered-id' then return { 1, info[j + 1] } end
      end
    end
  end
end
return { 1, '0-0' }
