--[[
  heartbeat-11: one protocol step of one member (SPEC section 3): join (memberEpoch 0), rejoin,
  normal heartbeat (> 0) and leave (-1), with lease expiry of other members, reconciliation and the
  assignment lease, atomically.

  KEYS[1..11]  the group's coordinator keys (includes/groupKeys.lua)
  ARGV[1..7]   coordinator settings (includes/config.lua)
  ARGV[8]  consumerGroup           ARGV[9]  memberId               ARGV[10] memberEpoch
  ARGV[11] memberName              ARGV[12] runtimeMaxConcurrency  ARGV[13] activeConsumerWorkers
  ARGV[14] weight                  ARGV[15] sessionTimeoutMs       ARGV[16] rebalanceTimeoutMs
  ARGV[17] metadataVersion         ARGV[18] owned (CSV)            ARGV[19] revoking (CSV)
  ARGV[20] ackedRevocations (CSV)

  Output: the heartbeat response (includes/respond.lua), or { errorCode, message } when the request
  was refused; a refused request changed nothing.

  The steady-state path (current epoch, report equal to the stored assignment, member converged)
  decodes only the caller's record and writes only its lease.
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

local groupName = ARGV[8]
local memberId = ARGV[9]
local memberName = ARGV[11]
local rawOwned = ARGV[18]

-- 1. Validate everything before touching anything.
if not isValidMemberId(memberId) then
  return errorResponse(ERR_INVALID_REQUEST, 'memberId must be 1-128 characters of A-Z a-z 0-9 . _ -')
end
if type(memberName) ~= 'string' or #memberName < 1 or #memberName > 256 or string.find(memberName, '%c') then
  return errorResponse(ERR_INVALID_REQUEST, 'memberName must be 1-256 printable characters')
end
local req, err = parseIntegers({
  { 'memberEpoch', 10, -1, MAX_EPOCH },
  { 'runtimeMaxConcurrency', 12, 1, 1000000 },
  { 'activeConsumerWorkers', 13, 0, 1000000 },
  { 'weight', 14, 1, 1000000 },
  { 'sessionTimeoutMs', 15, 10, MAX_TIMEOUT_MS },
  { 'rebalanceTimeoutMs', 16, 10, MAX_TIMEOUT_MS },
  { 'metadataVersion', 17, 0, MAX_EPOCH },
})
if not req then return errorResponse(ERR_INVALID_REQUEST, err) end

local stream = loadStream(K)
if not stream then
  return errorResponse(ERR_GROUP_NOT_FOUND, 'the stream prefix has no metadata: create it with CoordinatorAdmin.createStream')
end
local owned, revokingReport, acked
owned, err = parseShardList('owned', rawOwned, stream.shardCount)
if not owned then return errorResponse(ERR_INVALID_REQUEST, err) end
revokingReport, err = parseShardList('revoking', ARGV[19], stream.shardCount)
if not revokingReport then return errorResponse(ERR_INVALID_REQUEST, err) end
acked, err = parseShardList('ackedRevocations', ARGV[20], stream.shardCount)
if not acked then return errorResponse(ERR_INVALID_REQUEST, err) end

local memberEpoch = req.memberEpoch
local now = nowMs()
local g = loadGroup(K)
local rec = nil
if g then rec = loadMember(K, memberId) end

-- 2. Epoch and ownership checks of a normal heartbeat: an error changes no state.
if memberEpoch > 0 then
  local code, message = checkMemberEpoch(K, rec, memberId, memberEpoch, now)
  if code ~= ERR_NONE then return errorResponse(code, message) end
  local violation = ownershipViolation(K, rec, owned)
  if violation then return errorResponse(ERR_FENCED_MEMBER_EPOCH, violation) end
end

-- 3. Accepted. Time-driven removals of other members come first, so this step sees them.
if not g then
  if memberEpoch == -1 then
    return { ERR_NONE, '', -1, cfg.heartbeatIntervalMs, req.sessionTimeoutMs, '', '', '', 0, 0, 'EMPTY',
      stream.metadataVersion, stream.shardCount, false, 0, '' }
  end
  g = createGroup(K, groupName, now)
end
local groupEpochBefore = g.groupEpoch
expireMembers(K, cfg, g, now)
trimRetained(K, cfg, g, now)
if g.groupEpoch ~= groupEpochBefore then rec = loadMember(K, memberId) end

-- Leave: shards are free at once; the record stays as LEFT until retention ends.
if memberEpoch == -1 then
  if rec and rec.state == 'ACTIVE' then removeMember(K, cfg, g, rec, 'LEFT', now, 'leave') end
  return { ERR_NONE, '', -1, cfg.heartbeatIntervalMs, req.sessionTimeoutMs, '', '', '', g.groupEpoch,
    g.assignmentEpoch, groupState(K, g), stream.metadataVersion, stream.shardCount, false, 0, '' }
end

local dirty = false
local mustReconcile = false
if memberEpoch == 0 then
  if not rec then
    bumpGroupEpoch(K, g, now)
    rec = {
      id = memberId, name = memberName, state = 'ACTIVE', epoch = 0, prevEpoch = 0, known = 0,
      joinEpoch = g.groupEpoch, mv = req.metadataVersion, rmc = req.runtimeMaxConcurrency,
      acw = req.activeConsumerWorkers, weight = req.weight, st = req.sessionTimeoutMs,
      rt = req.rebalanceTimeoutMs, owned = '', revoking = '', pending = '', lastHb = now,
      leaseExp = now + req.sessionTimeoutMs,
    }
    appendEvent(K, cfg, g, 'MEMBER_JOINED', memberId, memberName)
  elseif rec.state == 'ACTIVE' and rec.epoch == 0 and rec.owned == '' and rec.revoking == '' then
    -- The same join again (its answer was lost): the member holds nothing that a rejoin would drop.
  else
    -- A rejoin: whatever the member held is dropped first (shard fencing protects those shards),
    -- and it waits for a target computed after this join, so its next epoch is strictly higher.
    local previousState = rec.state
    if previousState == 'ACTIVE' then
      releaseShards(K, memberId, csvToList(rec.owned))
      releaseShards(K, memberId, csvToList(rec.revoking))
      redis.call('ZREM', K.deadlines, memberId)
    else
      redis.call('ZREM', K.retained, memberId)
    end
    rec.state, rec.owned, rec.revoking, rec.pending, rec.endedAt = 'ACTIVE', '', '', '', nil
    bumpGroupEpoch(K, g, now)
    rec.joinEpoch = g.groupEpoch
    appendEvent(K, cfg, g, 'MEMBER_REJOINED', memberId, previousState)
  end
  dirty, mustReconcile = true, true
end

-- 4. What the member reports about itself.
if rec.name ~= memberName or rec.rmc ~= req.runtimeMaxConcurrency or rec.acw ~= req.activeConsumerWorkers
    or rec.mv ~= req.metadataVersion or rec.st ~= req.sessionTimeoutMs or rec.rt ~= req.rebalanceTimeoutMs
    or rec.weight ~= req.weight then
  if rec.weight ~= req.weight and g.groupEpoch == groupEpochBefore then
    -- A weight is an input of the assignment.
    bumpGroupEpoch(K, g, now)
    appendEvent(K, cfg, g, 'MEMBER_WEIGHT_CHANGED', memberId, tostring(req.weight))
  end
  rec.name, rec.rmc, rec.acw, rec.mv = memberName, req.runtimeMaxConcurrency, req.activeConsumerWorkers, req.metadataVersion
  rec.st, rec.rt, rec.weight = req.sessionTimeoutMs, req.rebalanceTimeoutMs, req.weight
  dirty = true
end
redis.call('ZADD', K.leases, now + rec.st, memberId)

-- 5. Acknowledged revocations release their shards; those not being revoked from it are ignored.
if #acked > 0 and rec.revoking ~= '' then
  local ackedSet = listToSet(acked)
  local still, released = {}, {}
  for _, shard in ipairs(csvToList(rec.revoking)) do
    if ackedSet[shard] then released[#released + 1] = shard else still[#still + 1] = shard end
  end
  if #released > 0 then
    releaseShards(K, memberId, released)
    rec.revoking = listToCsv(still)
    appendEvent(K, cfg, g, 'SHARDS_RELEASED', memberId, listToCsv(released))
    dirty, mustReconcile = true, true
  end
end

-- 6. Reconcile unless the member already matches the target.
if mustReconcile or redis.call('SISMEMBER', K.unconverged, memberId) == 1 then
  reconcileMember(K, cfg, g, rec, now)
  dirty = true
end
return memberResponse(K, cfg, g, rec, stream, req.metadataVersion, now, dirty)
