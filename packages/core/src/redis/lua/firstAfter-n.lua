--[[
  firstAfter-n: for each shard stream, the id of the first entry after a given id, or '' when there
  is none. Read-only. A member sends it in the same pipeline as its blocking XREADGROUP, so it runs
  as soon as the read returns: when the first entry the member got from a shard is not the first
  entry after what it had read before, entries in between went to another consumer of the group (a
  zombie's read that arrived late, e.g. after a partition healed) and must be handled first. Entries
  someone takes after this runs come after this batch, and the next check finds them.

  KEYS[i]  a shard stream          ARGV[i]  the last id this member accounted for on it
  Output: { id or '' per stream }
]]
local out = {}
for i = 1, #KEYS do
  local first = redis.call('XRANGE', KEYS[i], '(' .. ARGV[i], '+', 'COUNT', 1)
  out[i] = first[1] and first[1][1] or ''
end
return out
