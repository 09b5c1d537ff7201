--[[
  commitAssignment-11: compare-and-set of the target assignment computed for groupEpoch G by the
  member that held the assignment lease (SPEC sections 1 and 3). The target is refused, and nothing
  changes, when G is no longer the group epoch or when it breaks invariant 5 (only ACTIVE members,
  every readable shard exactly once). Members whose assignment does not change move to the new epoch
  here, so that only the members that must move a shard have a reconciliation ahead of them.

  KEYS[1..11]  the group's coordinator keys (includes/groupKeys.lua)
  ARGV[1..7]   coordinator settings (includes/config.lua)
  ARGV[8]  consumerGroup   ARGV[9]  memberId   ARGV[10] memberEpoch   ARGV[11] groupEpoch G
  ARGV[12] target as JSON { memberId: "shard CSV" }   ARGV[13] metadataVersion the member runs with

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
if g then rec = loadMember(K, memberId) end
local code, message = checkMemberEpoch(K, rec, memberId, req.memberEpoch, now)
if code ~= ERR_NONE then return errorResponse(code, message) end

-- Invariant 5, checked against the group as it is now. Returns the canonical plan or an error.
local function validatePlan(raw)
  local ok, plan = pcall(cjson.decode, raw)
  if not ok or type(plan) ~= 'table' then return nil, 'the target must be a JSON object of memberId -> shard CSV' end
  local readable = csvToList(loadReadable(K, stream))
  local isReadable = listToSet(readable)
  local seen, covered, canonical = {}, 0, {}
  for id, csv in pairs(plan) do
    if type(id) ~= 'string' or type(csv) ~= 'string' then return nil, 'the target must map memberId strings to shard CSV strings' end
    if not redis.call('ZSCORE', K.leases, id) then return nil, 'member ' .. id .. ' is not an ACTIVE member of the group' end
    local list, listErr = parseShardList('target of ' .. id, csv, stream.shardCount)
    if not list then return nil, listErr end
    for _, shard in ipairs(list) do
      if not isReadable[shard] then return nil, 'shard ' .. shard .. ' (member ' .. id .. ') is not readable' end
      if seen[shard] then return nil, 'shard ' .. shard .. ' is assigned to both ' .. seen[shard] .. ' and ' .. id end
      seen[shard] = id
      covered = covered + 1
    end
    canonical[id] = listToCsv(list)
  end
  if covered < #readable and redis.call('ZCARD', K.leases) > 0 then
    for _, shard in ipairs(readable) do
      if not seen[shard] then return nil, 'readable shard ' .. shard .. ' is assigned to no member' end
    end
  end
  return canonical
end

local function persistTarget(plan, groupEpoch)
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
  g.assignmentEpoch = groupEpoch
  redis.call('HSET', K.groupMeta, 'assignmentEpoch', groupEpoch, 'updatedAt', now)
  setAssignmentLease(K, g, '', 0)
  appendEvent(K, cfg, g, 'TARGET_COMMITTED', memberId, total .. ' members')

  -- A member whose target equals what it holds, with nothing being revoked or pending, has
  -- converged already: it moves to the new epoch without a round trip (its old epoch stays valid as
  -- its previous epoch until it hears the new one). Everyone else must reconcile.
  local ids = redis.call('ZRANGE', K.leases, 0, -1)
  for i = 1, #ids do
    local member = loadMember(K, ids[i])
    if member.revoking == '' and member.pending == '' and member.owned == (plan[ids[i]] or '')
        and groupEpoch >= member.joinEpoch then
      if member.epoch < groupEpoch then
        setMemberEpoch(member, groupEpoch)
        saveMember(K, member)
      end
      redis.call('SREM', K.unconverged, ids[i])
    else
      redis.call('SADD', K.unconverged, ids[i])
    end
  end
end

expireMembers(K, cfg, g, now)
trimRetained(K, cfg, g, now)

local commitResult, commitMessage = ERR_NONE, ''
if req.groupEpoch ~= g.groupEpoch or g.assignmentEpoch >= req.groupEpoch then
  commitResult = ERR_STALE_GROUP_EPOCH
  commitMessage = 'the target was computed for groupEpoch ' .. req.groupEpoch .. ' but the group is at groupEpoch '
    .. g.groupEpoch .. ' with assignmentEpoch ' .. g.assignmentEpoch
else
  local plan, planErr = validatePlan(ARGV[12])
  if plan then
    persistTarget(plan, req.groupEpoch)
  else
    commitResult, commitMessage = ERR_INVALID_ASSIGNMENT, planErr
  end
end

rec = loadMember(K, memberId)
if rec.state ~= 'ACTIVE' then
  return errorResponse(ERR_UNKNOWN_MEMBER_ID, 'member ' .. memberId .. ' is not an active member of the group (' .. rec.state .. ')')
end
local dirty = false
if redis.call('SISMEMBER', K.unconverged, memberId) == 1 then
  reconcileMember(K, cfg, g, rec, now)
  dirty = true
end
local response = memberResponse(K, cfg, g, rec, stream, req.metadataVersion, now, dirty)
response[#response + 1] = commitResult
response[#response + 1] = commitMessage
return response
