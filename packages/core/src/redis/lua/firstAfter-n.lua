--[[
  firstAfter-n: for each shard stream, the id of the first entry after a given id, or '' when there
  is none. Read-only. A member calls it after a read, for the shards that returned entries: when the
  first entry it got from a shard is not the first entry after what it had read before, entries in
  between went to another consumer of the group (a zombie's read that arrived late, e.g. after a
  partition healed) and must be handled first. Calling it after the read is enough: entries taken
  later by someone else come after this batch, and the next check finds them.

  KEYS[i]  a shard stream          ARGV[i]  the last id this member accounted for on it
  Output: { id or '' per stream }
]]
local out = {}
for i = 1, #KEYS do
  local first = redis.call('XRANGE', KEYS[i], '(' .. ARGV[i], '+', 'COUNT', 1)
  out[i] = first[1] and first[1][1] or ''
end
return out
