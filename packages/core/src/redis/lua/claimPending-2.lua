--[[
  claimPending-2: takes over entries of the group that are pending on this shard, for the caller,
  while the caller holds the shard's fencing token. Four modes:
  - 'all', on gaining a shard: every pending entry, whoever holds it (the previous owner's
    unacknowledged work, and the caller's own from before a restart), in ID order, page by page
    with XAUTOCLAIM.
  - 'others', a periodic sweep while owning it: only entries pending for other consumers (a zombie
    whose blocked read Redis served after the shard moved), never the caller's own in-flight ones;
    the oldest first across all those consumers, up to count; its cursor is '0-0' when it took all
    of them, else the id up to which it did (the rest are newer).
  - 'range', after a read skipped entries: the entries pending (for anyone) from the cursor up to,
    not including, an end id, page by page; nothing at or past the end is touched, so entries the
    caller cannot queue in order yet are not moved under its name.
  - 'ids', the caller's own entries that it no longer tracks (their read reply was lost).

  KEYS[1]  the shard stream   KEYS[2]  the shard's fencing token
  ARGV[1]  consumerGroup      ARGV[2]  the caller's token   ARGV[3]  the caller's consumer name
  ARGV[4]  mode ('all' | 'others' | 'range' | 'ids')   ARGV[5]  cursor ('all', 'range')
  ARGV[6]  count              ARGV[7]  end id, exclusive ('range')   ARGV[7..]  ids ('ids')
  Modes 'all' and 'others' then delete the group's consumers of other members that have nothing
  pending here.
  Output: { 1, next cursor ('0-0' when done), entries, ids that were pending but deleted from the
  stream (Redis drops them from the pending list as it claims) } or { -1 } when the caller lost the shard.
]]
--- @include "includes/fence"
--- @include "includes/callInChunks"

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

-- XCLAIM of ids that were deleted from the stream drops them from the pending list and returns
-- nothing for them: they are reported, so the caller can say so instead of losing them silently.
-- The ids are a page of up to `count` (the member's batchSize) or the caller's untracked ones.
local function claimIds(stream, group, me, ids, entries, deleted)
  if #ids == 0 then return end
  local claimed = callInChunks({ 'XCLAIM', stream, group, me, 0 }, ids)
  local found = {}
  for i = 1, #claimed do
    if claimed[i] then
      entries[#entries + 1] = claimed[i]
      found[claimed[i][1]] = true
    end
  end
  for i = 1, #ids do
    if not found[ids[i]] then deleted[#deleted + 1] = ids[i] end
  end
end

if not holdsFence(KEYS[2], ARGV[2]) then return { -1 } end
local count = tonumber(ARGV[6])
if ARGV[4] == 'all' then
  local page = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[5], 'COUNT', count)
  if page[1] == '0-0' then forgetIdleConsumers(KEYS[1], ARGV[1], ARGV[3]) end
  return { 1, page[1], page[2], page[3] or {} }
end

if ARGV[4] == 'range' then
  local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[5], '(' .. ARGV[7], count)
  local ids = {}
  for i = 1, #pending do ids[i] = pending[i][1] end
  local entries, deleted = {}, {}
  claimIds(KEYS[1], ARGV[1], ARGV[3], ids, entries, deleted)
  -- A full page may have more after it: the caller goes on from just after its last id.
  local cursor = '0-0'
  if #ids == count then cursor = ids[#ids] end
  return { 1, cursor, entries, deleted }
end

if ARGV[4] == 'ids' then
  -- Only ids still pending: one acknowledged since the caller looked is not "deleted", just done.
  local ids = {}
  for i = 7, #ARGV do
    if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1) > 0 then ids[#ids + 1] = ARGV[i] end
  end
  local entries, deleted = {}, {}
  claimIds(KEYS[1], ARGV[1], ARGV[3], ids, entries, deleted)
  return { 1, '0-0', entries, deleted }
end

-- 'others': the oldest entries pending for other consumers, across all of them, in ID order. Not
-- consumer by consumer: a page of one zombie's later entries would leave another's earlier ones for
-- the next sweep, to run after newer ones (SPEC 5 order). The pending list is walked in ID order,
-- skipping the caller's own entries, for at most MAX_SWEEP_PAGES pages: whatever it stops at,
-- the entries it takes are older than every other consumer's entry it leaves. The cursor it
-- returns says how far that holds: every other consumer's entry up to it was taken ('0-0': all of
-- them), so the caller recovers its own lost entries only up to there in the same sweep.
local MAX_SWEEP_PAGES = 10
local ids = {}
local from = '-'
local reach = '0-0'
for page = 1, MAX_SWEEP_PAGES do
  local pending = redis.call('XPENDING', KEYS[1], ARGV[1], from, '+', count)
  for i = 1, #pending do
    if pending[i][2] ~= ARGV[3] then
      if #ids == count then
        reach = ids[#ids] -- a page is full and other consumers' entries are left after it
        break
      end
      ids[#ids + 1] = pending[i][1]
    end
  end
  if reach ~= '0-0' or #pending < count then break end
  from = '(' .. pending[#pending][1]
  if page == MAX_SWEEP_PAGES then reach = pending[#pending][1] end
end
local entries, deleted = {}, {}
claimIds(KEYS[1], ARGV[1], ARGV[3], ids, entries, deleted)
forgetIdleConsumers(KEYS[1], ARGV[1], ARGV[3])
return { 1, reach, entries, deleted }
