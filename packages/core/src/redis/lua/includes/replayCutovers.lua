--- @include "includes/shardLists"
-- The cutover steps a group created now walks through (docs/resharding.md, "Groups created after
-- resizes"): it reads the shard streams from their beginning, so it must cross every recorded
-- resize in order. `history` is the stream's `resizeHistory` (one { version, from, to, switchAt,
-- until } per ordered growth and per shrink, oldest first); `span` is 1 + the highest shard that may hold
-- entries now.
--
-- Step k lets the group read every shard that exists (0..span-1), holds each shard's entries from
-- the k-th resize's switchAt on, and completes once every shard is processed up to just before it.
-- Writes are checked against the shard count in effect at Redis time (appendEntries-5.lua) by the
-- shards' routing markers, so an entry routed with the count before a switch has an id below it and
-- one routed after has an id at or above it, with one exception: the markers are written just after
-- the resize (in the shards' own slots), and a growth (or an unordered shrink) switches a
-- millisecond after it, so until they are in place a producer still routing with the old count can
-- land a moved key on its OLD shard at or past switchAt, before the key's next entry lands on its
-- new one. So the shards a moved key leaves (a growth: every old shard 0..from-1; a shrink: the
-- removed ones) are `late`: processed up to the resize's `until` (switchAt + graceMs, capped just
-- below the next resize's switch), as the live cutover does, and held only after it; the shards
-- keys move to stay held from switchAt. History recorded before `until` was kept assumes the
-- default graceMs. Removed shards deleted since are simply not in the span.
local DEFAULT_GRACE_MS = 2000

-- "first,...,last" (ascending), "" when last < first.
local function shardRangeCsv(first, last)
  local list = {}
  for s = first, last do list[#list + 1] = s end
  return table.concat(list, ',')
end

local function replayCutovers(history, span)
  local all = rangeCsv(span)
  local steps = {}
  for i = 1, #history do
    local h = history[i]
    local step = {
      from = h.from, to = h.to, ordered = true, resizedAt = h.switchAt, switchAt = h.switchAt,
      ['until'] = h.switchAt - 1, wait = all, waitUntil = 'until', held = all, replay = true,
    }
    local late = tonumber(h['until']) or (h.switchAt + DEFAULT_GRACE_MS)
    local following = history[i + 1]
    if following and following.switchAt - 1 < late then late = following.switchAt - 1 end
    local left = h.to > h.from and shardRangeCsv(0, math.min(h.from, span) - 1) or shardRangeCsv(h.to, math.min(h.from, span) - 1)
    if late >= h.switchAt and left ~= '' then
      step['until'] = late
      step.late = left
    end
    steps[i] = step
  end
  return steps
end
