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
  Output: { 1, next cursor ('0-0' when done), entries } or { -1 } when the caller lost the shard.
]]
--- @include "includes/fence"

if not holdsFence(KEYS[2], ARGV[2]) then return { -1 } end
local count = tonumber(ARGV[6])
if ARGV[4] == 'all' then
  local page = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[5], 'COUNT', count)
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
table.sort(entries, function(a, b)
  local ams, aseq = string.match(a[1], '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b[1], '^(%d+)-(%d+)$')
  if ams ~= bms then return tonumber(ams) < tonumber(bms) end
  return tonumber(aseq) < tonumber(bseq)
end)
return { 1, '0-0', entries }
