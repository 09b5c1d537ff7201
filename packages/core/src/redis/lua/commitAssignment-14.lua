--[[
  commitAssignment-14: compare-and-set of the target assignment computed for groupEpoch G by the
  member that held the assignment lease (SPEC sections 1 and 3). The target is refused, and nothing
  changes, when G is no longer the group epoch or when it breaks invariant 5 (only ACTIVE members
  whose join is proven, see includes/unproven.lua; every readable shard exactly once). Only the
  members whose target changed have a reconciliation ahead of them; the others stay converged and
  take the new epoch at their next heartbeat.

  KEYS[1..14]  the group's coordinator keys (includes/groupKeys.lua)
  ARGV[1..8]   coordinator settings and the group's wake channel (includes/config.lua)
  ARGV[9]  consumerGroup   ARGV[10]  memberId   ARGV[11] memberEpoch   ARGV[12] groupEpoch G
  ARGV[13] target as JSON { memberId: "ascending shard CSV" }   ARGV[14] metadataVersion the member runs with
  ARGV[15] instanceId of the caller ('' = none): a commit from an instance that no longer holds the
           record (it was taken over since its heartbeat) is refused like a stale epoch

  Output: the committing member's heartbeat response (includes/respond.lua) followed by
  20 commitResult (ERR_NONE, ERR_STALE_GROUP_EPOCH or ERR_INVALID_ASSIGNMENT) and 21 its message;
  or { errorCode, message } when the member itself was refused.
]]
--- @include "includes/errorCodes"
--- @include "includes/groupKeys"
--- @include "includes/config"
--- @include "includes/time"
--- @include "includes/shardLists"
--- @include "includes/validate"
--- @include "includes/events"
--- @include "includes/wake"
--- @include "includes/stream"
--- @include "includes/group"
--- @include "includes/members"
--- @include "includes/expiry"
--- @include "includes/reconcile"
--- @include "includes/memberCheck"
--- @include "includes/instance"
--- @include "includes/unproven"
--- @include "includes/callContext"
--- @include "includes/respond"

local memberId = ARGV[10]
if not isValidMemberId(memberId) then return errorResponse(ERR_INVALID_REQUEST, MEMBER_ID_RULE) end
local req, err = parseIntegers({
  { 'memberEpoch', 11, 0, MAX_EPOCH },
  { 'groupEpoch', 12, 1, MAX_EPOCH },
  { 'metadataVersion', 14, 0, MAX_EPOCH },
})
if not req then return errorResponse(ERR_INVALID_REQUEST, err) end
local ctx = loadCallContext(K, memberId)
if not ctx then return errorResponse(ERR_GROUP_NOT_FOUND, NO_STREAM_MESSAGE) end
local stream, now, g, rec, minLease = ctx.stream, ctx.now, ctx.g, ctx.rec, ctx.minLease
-- A member waiting for its first target after a (re)join was told epoch 0 and may commit with it.
local claimedEpoch = req.memberEpoch
if claimedEpoch == 0 and rec and rec.waiting then claimedEpoch = rec.epoch end
local code, message = checkMemberEpoch(K, rec, memberId, claimedEpoch, now, minLease)
if code ~= ERR_NONE then return errorResponse(code, message) end
if isOtherInstance(rec, ARGV[15] or '') then
  return errorResponse(ERR_FENCED_MEMBER_EPOCH, 'member ' .. memberId .. ' was taken over by another instance; rejoin with memberEpoch 0')
end

-- Invariant 5, checked against the group as it is now: every member ACTIVE, every list strictly
-- ascending (so canonical and without repeats), every shard readable and in one list only, and every
-- readable shard covered. Returns the plan as { memberId = CSV }, or nil and what is wrong.
--
-- This visits every shard of the group while Redis waits, so it avoids what is slow in Lua: all lists
-- are parsed by one cjson call (C), joined with -1 as the boundary marker (no shard index is
-- negative, so a list that smuggles in a -1 changes the marker count and is refused); elements that
-- are not numbers fail the comparisons (caught below); nothing is converted back to strings.
local function checkPlan(plan, active)
  local shardCount = stream.count
  local fullRange = stream.readableIsFullRange
  local isReadable, readableCount = nil, shardCount
  if not fullRange then
    local readable = csvToList(loadReadable(K, stream))
    isReadable, readableCount = listToSet(readable), #readable
  end
  local ids, parts = {}, {}
  for id, csv in pairs(plan) do
    if type(id) ~= 'string' or type(csv) ~= 'string' then return nil, 'the target must map memberIds to shard CSV strings' end
    if not active[id] then return nil, 'member ' .. id .. ' is not an ACTIVE member of the group (or its join is unproven)' end
    if csv ~= '' then
      ids[#ids + 1] = id
      parts[#parts + 1] = csv
    end
  end
  local shards = cjson.decode('[' .. table.concat(parts, ',-1,') .. ']')
  local seen, member, previous, covered = {}, 1, -1, 0
  for i = 1, #shards do
    local shard = shards[i]
    if shard == -1 then
      member, previous = member + 1, -1
      if member > #ids then return nil, 'the target contains a negative shard index' end
    else
      local id = ids[member]
      if shard <= previous or shard % 1 ~= 0 then
        return nil, 'target of ' .. id .. ' is not a strictly ascending list of shard indices at ' .. tostring(shard)
      end
      if (fullRange and shard >= shardCount) or (not fullRange and not isReadable[shard]) then
        return nil, 'shard ' .. shard .. ' (member ' .. id .. ') is outside the readable shard set'
      end
      if seen[shard] then return nil, 'shard ' .. shard .. ' is assigned to both ' .. seen[shard] .. ' and ' .. id end
      seen[shard], previous, covered = id, shard, covered + 1
    end
  end
  if member ~= math.max(#ids, 1) then return nil, 'the target contains a negative shard index' end
  if covered < readableCount and next(active) ~= nil then
    for _, shard in ipairs(csvToList(loadReadable(K, stream))) do
      if not seen[shard] then return nil, 'readable shard ' .. shard .. ' is assigned to no member' end
    end
  end
  return plan
end

local function validatePlan(raw, active)
  local decoded, plan = pcall(cjson.decode, raw)
  if not decoded or type(plan) ~= 'table' then return nil, 'the target must be a JSON object of memberId -> shard CSV' end
  local ok, checked, problem = pcall(checkPlan, plan, active)
  if not ok then return nil, 'the target is not a set of shard index lists (' .. tostring(checked) .. ')' end
  return checked, problem
end

local function persistTarget(plan, groupEpoch, activeIds)
  -- Only the entries that change are written. A converged member (holding exactly its old target,
  -- nothing revoking or pending) whose target did not change stays converged: it takes the new epoch
  -- at its next heartbeat, without a reconciliation step and without this commit decoding any member
  -- record. Every member whose target changed must reconcile.
  local previous = {}
  local flat = redis.call('HGETALL', K.target)
  for i = 1, #flat, 2 do previous[flat[i]] = flat[i + 1] end
  local changed = {}
  for _, id in ipairs(activeIds) do
    if (plan[id] or '') ~= (previous[id] or '') then changed[#changed + 1] = id end
  end
  local gone = {}
  for id in pairs(previous) do
    if (plan[id] or '') == '' then gone[#gone + 1] = id end
  end
  local writes, total = {}, 0
  for id, csv in pairs(plan) do
    if csv ~= '' then
      total = total + 1
      if csv ~= previous[id] then
        writes[#writes + 1] = id
        writes[#writes + 1] = csv
      end
    end
  end
  -- As many members as the group has: in chunks.
  if #gone > 0 then callInChunks({ 'HDEL', K.target }, gone) end
  if #writes > 0 then callInChunks({ 'HSET', K.target }, writes) end
  if #changed > 0 then callInChunks({ 'SADD', K.unconverged }, changed) end
  g.assignmentEpoch = groupEpoch
  redis.call('HSET', K.groupMeta, 'assignmentEpoch', groupEpoch, 'updatedAt', now)
  setAssignmentLease(K, g, '', 0)
  appendEvent(K, cfg, g, 'TARGET_COMMITTED', memberId, total .. ' members, ' .. #changed .. ' changed')
  -- Only they have something to do (revoke, or take); the others take the new epoch at their next
  -- heartbeat, and the group is STABLE without it.
  wakeOnly(cfg, memberId, changed)
end

expireMembers(K, cfg, g, now, minLease)
trimRetained(K, cfg, g, now)

local commitResult, commitMessage = ERR_NONE, ''
if req.groupEpoch ~= g.groupEpoch or g.assignmentEpoch >= req.groupEpoch then
  commitResult = ERR_STALE_GROUP_EPOCH
  commitMessage = 'the target was computed for groupEpoch ' .. req.groupEpoch .. ' but the group is at groupEpoch '
    .. g.groupEpoch .. ' with assignmentEpoch ' .. g.assignmentEpoch
else
  -- An unproven member is ACTIVE but no part of the input (includes/unproven.lua): a target that
  -- names it is refused like one that names a member gone.
  local activeIds = assignableMembers(K)
  local plan, planErr = validatePlan(ARGV[13], listToSet(activeIds))
  if plan then
    persistTarget(plan, req.groupEpoch, activeIds)
  else
    commitResult, commitMessage = ERR_INVALID_ASSIGNMENT, planErr
  end
end

rec = loadMember(K, memberId)
if rec.state ~= 'ACTIVE' then
  return errorResponse(ERR_UNKNOWN_MEMBER_ID, 'member ' .. memberId .. ' is not an active member of the group (' .. rec.state .. ')')
end
local dirty = false
if not rec.unproven and (rec.epoch < g.assignmentEpoch or isUnconverged(K, memberId)) then
  reconcileMember(K, cfg, g, rec, now)
  dirty = true
end
local response = memberResponse(K, cfg, g, rec, stream, req.metadataVersion, now, dirty)
response[#response + 1] = commitResult
response[#response + 1] = commitMessage
return response
