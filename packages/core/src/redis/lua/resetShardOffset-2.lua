--[[
  resetShardOffset-2: moves one group's position on one shard (CoordinatorAdmin.resetOffsets):
  XGROUP SETID, or XGROUP CREATE where the group has not read the shard yet (so its first reader
  starts at the new position, not at 0). Unless forced, only if the group's fencing token on the
  shard is still the one the caller read before it checked that the group has no live member
  (SPEC 10.5): a member granted the shard since installed its own token (claimShard-2.lua), and
  would read on from a position moved under it.

  KEYS[1]  the shard stream   KEYS[2]  the group's fencing token on the shard
  ARGV[1]  consumerGroup   ARGV[2]  the new last-delivered id
  ARGV[3]  the token read before the check ('' : none), or '*' (forced: any)
  Output: {'moved'} done; {'claimed', token} nothing changed: a member claimed the shard since.
]]
local stream, fence = KEYS[1], KEYS[2]
local group, id, expected = ARGV[1], ARGV[2], ARGV[3]

if expected ~= '*' then
  local token = redis.call('GET', fence) or ''
  if token ~= expected then return { 'claimed', token } end
end
local created = redis.pcall('XGROUP', 'CREATE', stream, group, id, 'MKSTREAM')
if type(created) == 'table' and created.err then
  if not string.find(created.err, 'BUSYGROUP', 1, true) then return redis.error_reply(created.err) end
  redis.call('XGROUP', 'SETID', stream, group, id)
end
return { 'moved' }
