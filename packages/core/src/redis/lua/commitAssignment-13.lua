--[[
  commitAssignment-13: compare-and-set of the target assignment computed for groupEpoch G by the
  member that held the assignment lease (SPEC sections 1 and 3). The target is refused, and nothing
  changes, when G is no longer the group epoch or when it breaks invariant 5 (only ACTIVE members,
  every readable shard exactly once). Only the members whose target changed have a reconciliation
  ahead of them; the others stay converged and take the new epoch at their next heartbeat.

  KEYS[1..13]  the group's coordinator keys (includes/groupKeys.lua)
  ARGV[1..7]   coordinator settings (includes/config.lua)
  ARGV[8]  consumerGroup   ARGV[9]  memberId   ARGV[10] memberEpoch   ARGV[11] groupEpoch G
  ARGV[12] target as JSON { memberId: "ascending shard CSV" }   ARGV[13] metadataVersion the member runs with

  Output: the committing member's heartbeat response (includes/respond.lua) followed by
  17 commitResult (ERR_NONE, ERR_STALE_GROUP_EPOCH or ERR_INVALID_ASSIGNMENT) and 18 its message;
  or { errorCode, message } when the member itself was refused.
]]
--- @include "includes/errorCodes"
--- @include "includes/groupKeys"
--- @include "includes/config"
--- @include "includes/time"
--- @include "includes/shardLists"
--- @include "includes/validate"
--- @include "includes/events"
--- @include "includes/stream"
--- @include "includes/group"
--- @include "includes/members"
--- @include "includes/expiry"
--- @include "includes/reconcile"
--- @include "includes/memberCheck"
--- @include "includes/respond"

local memberId = ARGV[9]
if not isValidMemberId(memberId) then
  return errorResponse(ERR_INVALID_REQUEST, 'memberId must be 1-128 characters of A-Z a-z 0-9 . _ -')
end
local req, err = parseIntegers({
  { 'memberEpoch', 10, 0, MAX_EPOCH },
  { 'groupEpoch', 11, 1, MAX_EPOCH },
  { 'metadataVersion', 13, 0, MAX_EPOCH },
})
if not req then return errorResponse(ERR_INVALID_REQUEST, err) end
local stream = loadStream(K)
if not stream then
  return errorResponse(ERR_GROUP_NOT_FOUND, 'the stream prefix has no metadata: create it with CoordinatorAdmin.createStream')
end
local now = nowMs()
local g = loadGroup(K)
local rec = nil
local minLease = nil
if g then
  rec = loadMember(K, memberId)
  minLease = earliestLease(K)
end
local code, message = checkMemberEpoch(K, rec, memberId, req.memberEpoch, now, minLease)
if code ~= ERR_NONE then return errorResponse(code, message) end

-- Invariant 5, checked against the group as it is now: every member ACTIVE, every list strictly
-- ascending (so canonical and without repeats), every shard readable and in one list only, and every
-- readable shard covered. Returns the plan as { memberId = CSV }, or nil and what is wrong.
-- This runs over every shard of the group while Redis waits, so it avoids what is slow in Lua here:
-- one pattern per list (not per shard), C-side cjson for the numbers, no number-to-string work.
local function validatePlan(raw, active)
  local ok, plan = pcall(cjson.decode, raw)
  if not ok or type(plan) ~= 'table' then return nil, 'the target must be a JSON object of memberId -> shard CSV' end
  local shardCount = stream.shardCount
  local fullRange = stream.readableIsFullRange
  local isReadable = nil
  local readableCount = shardCount
  if not fullRange then
    local readable = csvToList(loadReadable(K, stream))
    isReadable = listToSet(readable)
    readableCount = #readable
  end
  local seen, covered = {}, 0
  for id, csv in pairs(plan) do
    if type(id) ~= 'string' or type(csv) ~= 'string' or string.find(csv, '[^%d,]') then
      return nil, 'the target must map memberIds to shard CSV strings (digits and commas)'
    end
    if not active[id] then return nil, 'member ' .. id .. ' is not an ACTIVE member of the group' end
    if csv ~= '' then
      local parsed, list = pcall(cjson.decode, '[' .. csv .. ']')
      if not parsed or #list > shardCount then return nil, 'target of ' .. id .. ' is not a list of shard indices' end
      local previous = -1
      for i = 1, #list do
        local shard = list[i]
        if shard <= previous then return nil, 'target of ' .. id .. ' is not strictly ascending at shard ' .. shard end
        if (fullRange and shard >= shardCount) or (not fullRange and not isReadable[shard]) then
          return nil, 'shard ' .. shard .. ' (member ' .. id .. ') is outside the readable shard set'
        end
        if seen[shard] then return nil, 'shard ' .. shard .. ' is assigned to both ' .. seen[shard] .. ' and ' .. id end
        seen[shard] = id
        previous = shard
      end
      covered = covered + #list
    end
  end
  if covered < readableCount and next(active) ~= nil then
    local readable = csvToList(loadReadable(K, stream))
    for _, shard in ipairs(readable) do
      if not seen[shard] then return nil, 'readable shard ' .. shard .. ' is assigned to no member' end
    end
  end
  return plan
end

local function persistTarget(plan, groupEpoch, activeIds)
  -- A converged member (holding exactly its old target, nothing revoking or pending) whose target
  -- did not change stays converged: it takes the new epoch at its next heartbeat, without a
  -- reconciliation step and without this commit decoding any member record. Every member whose
  -- target changed must reconcile.
  local previous = {}
  local flat = redis.call('HGETALL', K.target)
  for i = 1, #flat, 2 do previous[flat[i]] = flat[i + 1] end
  local changed = {}
  for _, id in ipairs(activeIds) do
    if (plan[id] or '') ~= (previous[id] or '') then changed[#changed + 1] = id end
  end

  redis.call('DEL', K.target)
  local args, total = {}, 0
  for id, csv in pairs(plan) do
    if csv ~= '' then
      args[#args + 1] = id
      args[#args + 1] = csv
      total = total + 1
      if #args >= 1000 then
        redis.call('HSET', K.target, unpack(args))
        args = {}
      end
    end
  end
  if #args > 0 then redis.call('HSET', K.target, unpack(args)) end
  for i = 1, #changed, 500 do
    redis.call('SADD', K.unconverged, unpack(changed, i, math.min(i + 499, #changed)))
  end
  g.assignmentEpoch = groupEpoch
  redis.call('HSET', K.groupMeta, 'assignmentEpoch', groupEpoch, 'updatedAt', now)
  setAssignmentLease(K, g, '', 0)
  appendEvent(K, cfg, g, 'TARGET_COMMITTED', memberId, total .. ' members, ' .. #changed .. ' changed')
end

expireMembers(K, cfg, g, now, minLease)
trimRetained(K, cfg, g, now)

local commitResult, commitMessage = ERR_NONE, ''
if req.groupEpoch ~= g.groupEpoch or g.assignmentEpoch >= req.groupEpoch then
  commitResult = ERR_STALE_GROUP_EPOCH
  commitMessage = 'the target was computed for groupEpoch ' .. req.groupEpoch .. ' but the group is at groupEpoch '
    .. g.groupEpoch .. ' with assignmentEpoch ' .. g.assignmentEpoch
else
  local activeIds = redis.call('ZRANGE', K.leases, 0, -1)
  local plan, planErr = validatePlan(ARGV[12], listToSet(activeIds))
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
if rec.epoch < g.assignmentEpoch or isUnconverged(K, memberId) then
  reconcileMember(K, cfg, g, rec, now)
  dirty = true
end
local response = memberResponse(K, cfg, g, rec, stream, req.metadataVersion, now, dirty)
response[#response + 1] = commitResult
response[#response + 1] = commitMessage
return response
