--[[
  resizeShards-n: changes the shard count of a stream prefix while it runs (SPEC section 6,
  docs/resharding.md), atomically for the stream and every consumer group of it.

  KEYS[1]  the stream's metadata hash           KEYS[2]  the prefix's set of consumer groups
  KEYS[3..] per group, in the order of ARGV[7..]: its metadata hash, its event stream, its leases zset
  ARGV[1] newCount   ARGV[2] ordered (1/0)   ARGV[3] graceMs   ARGV[4] switchDelayMs
  ARGV[5] eventLogMaxLen   ARGV[6] number of groups G
  ARGV[7..6+G] group names   ARGV[7+G..6+2G] the groups' wake channels

  Output: { errorCode, message, changed (0/1), stream metadata (flat HGETALL) }, or { 'RETRY' } when
  the set of groups is not the one the caller passed (a group was created meanwhile: read it again).

  Each group gets a new groupEpoch (the assignment's input changed), an event, and, unless the new
  shards are readable at once, a cutover record: which shards must be processed up to which point
  before its readable shard set changes again (completeCutover-14.lua).
]]
--- @include "includes/errorCodes"
--- @include "includes/time"
--- @include "includes/shardLists"
--- @include "includes/events"

local newCount = tonumber(ARGV[1])
local ordered = ARGV[2] == '1'
local graceMs, switchDelayMs = tonumber(ARGV[3]), tonumber(ARGV[4])
local cfg = { eventLogMaxLen = tonumber(ARGV[5]) }
local groupCount = tonumber(ARGV[6])

local meta = redis.call('HMGET', KEYS[1], 'shardCount', 'metadataVersion', 'shardSpan')
if not meta[1] then
  return { ERR_GROUP_NOT_FOUND, 'the stream prefix has no metadata: create it with CoordinatorAdmin.createStream', 0, {} }
end
local oldCount, version = tonumber(meta[1]), tonumber(meta[2])
local span = math.max(oldCount, tonumber(meta[3]) or oldCount)

-- The caller read the set of groups before this call; a group created since is retried, never missed.
if redis.call('SCARD', KEYS[2]) ~= groupCount then return { 'RETRY' } end
for i = 1, groupCount do
  if redis.call('SISMEMBER', KEYS[2], ARGV[6 + i]) == 0 then return { 'RETRY' } end
end

if newCount == oldCount then return { ERR_NONE, '', 0, redis.call('HGETALL', KEYS[1]) } end

-- Shards that deleteDrainedShards retired and has not finished deleting: a resize now could grow
-- back into one whose delete is still to come (CoordinatorAdmin.resizeShards finishes it first).
local retiringSpan = redis.call('HGET', KEYS[1], 'retiringSpan')
if retiringSpan then
  return { ERR_RESIZE_IN_PROGRESS, 'removed shards ' .. oldCount .. '..' .. (tonumber(retiringSpan) - 1)
    .. ' are still being deleted: call CoordinatorAdmin.deleteDrainedShards again to finish', 0, {} }
end

-- One resize at a time: a group still cutting over (or draining) from the previous one must finish.
local busy = {}
for i = 1, groupCount do
  if redis.call('HEXISTS', KEYS[3 * i], 'cutover') == 1 then busy[#busy + 1] = ARGV[6 + i] end
end
if #busy > 0 then
  return { ERR_RESIZE_IN_PROGRESS, 'the previous resize is still in progress for group(s) ' .. table.concat(busy, ', ')
    .. ': wait until their cutover completes (CoordinatorAdmin.describeCutover)', 0, {} }
end

local now = nowMs()
local growing = newCount > oldCount
-- Producers switch to the new count at switchAt. An ordered shrink gives members switchDelayMs to
-- learn that the surviving shards are held from that point on, before any moved key is written there.
-- Never the current millisecond: an entry written just before this call can carry this very
-- millisecond in its id. The routing markers refuse the old count from switchAt on once they are
-- written, right after this script: a growth's old-count writes may reach a little past switchAt
-- (at most to `until`, which includes/replayCutovers.lua waits for); an ordered shrink's switch waits
-- for them (switchDelayMs).
-- (An unordered growth promises no order and is not replayed: it switches at once.)
local switchAt = now
if ordered and growing then switchAt = now + 1 end
if not growing then switchAt = now + math.max(1, ordered and switchDelayMs or 0) end
-- An ordered shrink's holds reach a member through a heartbeat answer (the wake-up only hastens
-- it, and a wake-up published while a subscriber reconnects is lost), while its reader reads on
-- a connection of its own. So producers switch only once every member's lease as of now has run
-- out: a member still starting handlers after that has had a heartbeat answered since this resize,
-- which told it of the new version, and it starts none until it has read the hold.
if ordered and not growing then
  for i = 1, groupCount do
    local last = redis.call('ZRANGE', KEYS[3 * i + 2], -1, -1, 'WITHSCORES')
    if last[2] and tonumber(last[2]) + 1 > switchAt then switchAt = tonumber(last[2]) + 1 end
  end
end
version = version + 1
span = math.max(span, newCount)

-- What each group reads until its cutover completes, and what it waits for.
local readableDuring, cutover = nil, nil
local oldRange = {}
for s = 0, oldCount - 1 do oldRange[#oldRange + 1] = s end
if growing and ordered then
  -- New shards stay unreadable until every old shard is processed up to `until`: keys move only
  -- from old shards to new ones, so nothing of a moved key is read out of order.
  readableDuring = rangeCsv(oldCount)
  cutover = { wait = oldRange, waitUntil = 'until', held = '' }
elseif not growing then
  -- Removed shards take no more writes but stay readable until drained. Ordered: the surviving
  -- shards, which receive the moved keys, are read only up to switchAt until then.
  local removed, survivors = {}, ''
  for s = newCount, oldCount - 1 do removed[#removed + 1] = s end
  if ordered then survivors = rangeCsv(newCount) end
  readableDuring = rangeCsv(oldCount)
  cutover = { wait = removed, waitUntil = 'drained', held = survivors }
end

local cutoverJson = nil
if cutover then
  cutoverJson = cjson.encode({
    version = version, from = oldCount, to = newCount, ordered = ordered, resizedAt = now,
    switchAt = switchAt, ['until'] = switchAt + graceMs, wait = table.concat(cutover.wait, ','),
    waitUntil = cutover.waitUntil, held = cutover.held,
  })
end

redis.call('HSET', KEYS[1], 'shardCount', newCount, 'previousShardCount', oldCount, 'switchAt', switchAt,
  'shardSpan', span, 'metadataVersion', version, 'writableShardSet', rangeCsv(newCount),
  'readableShardSet', readableDuring or rangeCsv(newCount), 'updatedAt', now)
-- Groups created later cross every ordered growth and every shrink of the stream's history in
-- order (includes/replayCutovers.lua); an unordered growth promised no order, so it is not kept.
-- (`cutover`/`cutoverReadable` are the single template older versions kept: gone for good.)
redis.call('HDEL', KEYS[1], 'cutover', 'cutoverReadable')
if ordered or not growing then
  local raw = redis.call('HGET', KEYS[1], 'resizeHistory')
  local history = raw and cjson.decode(raw) or {}
  -- `until`: a growth's markers are written after this script (they live in the shards' slots), so a
  -- producer still on the old count can land a moved key on its old shard at or past switchAt until
  -- then; a later group's step waits for the old shards up to `until` (includes/replayCutovers.lua).
  history[#history + 1] = { version = version, from = oldCount, to = newCount, switchAt = switchAt, ['until'] = switchAt + graceMs }
  redis.call('HSET', KEYS[1], 'resizeHistory', cjson.encode(history))
end

local detail = oldCount .. ' -> ' .. newCount .. ' shards, ' .. (ordered and 'ordered' or 'unordered')
  .. ', metadataVersion ' .. version
for i = 1, groupCount do
  local groupMeta, events = KEYS[3 * i], KEYS[3 * i + 1]
  local epochs = redis.call('HMGET', groupMeta, 'groupEpoch', 'assignmentEpoch')
  if epochs[1] then
    local g = { groupEpoch = tonumber(epochs[1]) + 1, assignmentEpoch = tonumber(epochs[2]) }
    redis.call('HSET', groupMeta, 'groupEpoch', g.groupEpoch, 'epochBumpedAt', now, 'updatedAt', now)
    if cutoverJson then
      redis.call('HSET', groupMeta, 'cutover', cutoverJson, 'readableShardSet', readableDuring)
    else
      redis.call('HDEL', groupMeta, 'cutover', 'readableShardSet')
    end
    appendEvent({ events = events }, cfg, g, 'SHARDS_RESIZED', '', detail)
    local channel = ARGV[6 + groupCount + i]
    if channel ~= '' then redis.call('PUBLISH', channel, 'resize') end
  end
end
return { ERR_NONE, '', 1, redis.call('HGETALL', KEYS[1]) }
