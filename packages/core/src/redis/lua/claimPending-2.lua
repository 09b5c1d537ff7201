--[[
  claimPending-2: takes over entries of the group that are pending on this shard, for the caller,
  while the caller holds the shard's fencing token. Two modes:
  - 'all', on gaining a shard: every pending entry, whoever holds it (the previous owner's
    unacknowledged work, and the caller's own from before a restart), in ID order, page by page
    with XAUTOCLAIM.
  - 'others', a periodic sweep while owning it: only entries pending for other consumers (a zombie
    whose blocked read Redis served after the shard moved), never the caller's own in-flight ones.

  KEYS[1]  the shard stream   KEYS[2]  the shard's fencing token
  ARGV[1]  consumerGroup      ARGV[2]  the caller's token   ARGV[3]  the caller's consumer name
  ARGV[4]  mode ('all' | 'others')   ARGV[5]  cursor (for 'all')   ARGV[6]  count
  Both modes then delete the group's consumers of other members that have nothing pending here.
  Output: { 1, next cursor ('0-0' when done), entries } or { -1 } when the caller lost the shard.
]]
--- @include "includes/fence"

-- Consumers of other members with nothing pending here are history once this member holds the
-- shard (SPEC 2.4: cleaned up after their pending entries were taken over). Deleting one with
-- pending entries would drop them, so those stay until a sweep has claimed their entries. A zombie
-- whose blocked read is served later simply comes back as a consumer, and the next sweep recovers it.
local function forgetIdleConsumers(stream, group, me)
  for _, consumer in ipairs(redis.call('XINFO', 'CONSUMERS', stream, group)) do
    local name, pending
    for i = 1, #consumer, 2 do
      if consumer[i] == 'name' then name = consumer[i + 1] elseif consumer[i] == 'pending' then pending = consumer[i + 1] end
    end
    if name ~= me and pending == 0 then redis.call('XGROUP', 'DELCONSUMER', stream, group, name) end
  end
end

if not holdsFence(KEYS[2], ARGV[2]) then return { -1 } end
local count = tonumber(ARGV[6])
if ARGV[4] == 'all' then
  local page = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[5], 'COUNT', count)
  if page[1] == '0-0' then forgetIdleConsumers(KEYS[1], ARGV[1], ARGV[3]) end
  return { 1, page[1], page[2] }
end

local summary = redis.call('XPENDING', KEYS[1], ARGV[1])
local entries = {}
for _, consumer in ipairs(summary[4] or {}) do
  if consumer[1] ~= ARGV[3] and #entries < count then
    local pending = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', count - #entries, consumer[1])
    local ids = {}
    for i = 1, #pending do ids[i] = pending[i][1] end
    if #ids > 0 then
      local claimed = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, unpack(ids))
      for i = 1, #claimed do
        if claimed[i] then entries[#entries + 1] = claimed[i] end
      end
    end
  end
end
forgetIdleConsumers(KEYS[1], ARGV[1], ARGV[3])
table.sort(entries, function(a, b)
  local ams, aseq = string.match(a[1], '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b[1], '^(%d+)-(%d+)$')
  if ams ~= bms then return tonumber(ams) < tonumber(bms) end
  return tonumber(aseq) < tonumber(bseq)
end)
return { 1, '0-0', entries }
