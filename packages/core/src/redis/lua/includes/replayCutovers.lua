--- @include "includes/shardLists"
-- The cutover steps a group created now walks through (docs/resharding.md, "Groups created after
-- resizes"): it reads the shard streams from their beginning, so it must cross every recorded
-- resize in order. `history` is the stream's `resizeHistory` (one { version, from, to, switchAt }
-- per ordered growth and per shrink, oldest first); `span` is 1 + the highest shard that may hold
-- entries now.
--
-- Step k lets the group read every shard that exists (0..span-1), holds each shard's entries from
-- the k-th resize's switchAt on, and completes once every shard is processed up to just before it.
-- Writes are checked against the shard count in effect at Redis time (appendEntries-2.lua), so an
-- entry routed with the count before a switch has an id below it and one routed after has an id at
-- or above it: this barrier per resize keeps every key in order whatever the resizes were (growths,
-- shrinks, shards removed and added again). Removed shards deleted since are simply not in the span.
local function replayCutovers(history, span)
  local all = rangeCsv(span)
  local steps = {}
  for i = 1, #history do
    local h = history[i]
    steps[i] = {
      from = h.from, to = h.to, ordered = true, resizedAt = h.switchAt, switchAt = h.switchAt,
      ['until'] = h.switchAt - 1, wait = all, waitUntil = 'until', held = all, replay = true,
    }
  end
  return steps
end
