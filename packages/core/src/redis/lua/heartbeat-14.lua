--[[
  heartbeat-14: one protocol step of one member (SPEC section 3): join (memberEpoch 0), rejoin,
  normal heartbeat (> 0) and leave (-1), with lease expiry of other members, reconciliation and the
  assignment lease, atomically.

  KEYS[1..14]  the group's coordinator keys (includes/groupKeys.lua)
  ARGV[1..8]   coordinator settings and the group's wake channel (includes/config.lua)
  ARGV[9]  consumerGroup           ARGV[10]  memberId               ARGV[11] memberEpoch
  ARGV[12] memberName              ARGV[13] runtimeMaxConcurrency  ARGV[14] activeConsumerWorkers
  ARGV[15] weight                  ARGV[16] sessionTimeoutMs       ARGV[17] rebalanceTimeoutMs
  ARGV[18] metadataVersion         ARGV[19] owned (CSV)            ARGV[20] revoking (CSV)
  ARGV[21] ackedRevocations (CSV)     ARGV[22] instanceId (one per member process; '' = none)
  ARGV[23] static ('1': the memberId is a stable memberInstanceId, see includes/static.lua; '' = not)
  ARGV[24] deadline: Redis time (ms) after which the request changes nothing ('' = none)
  ARGV[25] answeredAt: Redis time (ms) of the latest answer the member received in time, 0 before
           any ('' = the caller does not track its answers; see includes/answers.lua)
  ARGV[26] acceptedAt: the same for the latest accepted answer (a renewal the member can prove);
           given exactly when answeredAt is

  Output: the heartbeat response (includes/respond.lua), or { errorCode, message } when the request
  was refused; a refused request changed nothing. A request that runs after its deadline is refused
  first of all with { DEADLINE_EXCEEDED, message, Redis time (ms) }: its member stopped waiting for
  the answer by then (the request sat in an offline queue or on a slow link), and a heartbeat whose
  answer the member ignores must not renew a lease it may have given up (SPEC 9.1). A request of a
  member whose answers come back late (no accepted one received in time since its lease was last
  renewed) is refused with NO_TIMELY_ANSWER and changes nothing, so its lease runs out (SPEC 10.2,
  includes/answers.lua); a leave is always taken. Every refusal carries Redis time. A join taken on a
  fresh answer only (not by the renewal rule) makes the member unproven: no shards, and no epoch
  moved for it, until a later request proves that the answer to its join came in time
  (includes/unproven.lua). A member is checked (ACTIVE, lease, epoch, instance) before its shard
  lists are: a stale member is told it is stale even when its report no longer fits the stream
  (shards deleted after a shrink while it was paused). A join for an ACTIVE member with a live lease
  from another instance is refused with FENCED_INSTANCE_ID (SPEC 9.4), unless the member is static
  and its instance went away or fell silent (includes/static.lua).

  The steady-state heartbeat (current epoch, report equal to the stored assignment, nothing changed,
  group STABLE) is answered before the rest of the script is even defined: it decodes only the
  caller's record and writes only its lease.
]]
--- @include "includes/errorCodes"
--- @include "includes/groupKeys"

-- Late: the member stopped waiting for this answer before the request got here, so it changes
-- nothing, whatever it says (it would renew a lease the member may have given up). Before anything
-- else, the steady path included.
local callTime = redis.call('TIME')
local callNow = tonumber(callTime[1]) * 1000 + math.floor(tonumber(callTime[2]) / 1000)
local deadline = tonumber(ARGV[24])
if deadline and callNow > deadline then
  return { ERR_DEADLINE_EXCEEDED, 'the request reached Redis ' .. (callNow - deadline) .. ' ms after its deadline; nothing changed', callNow }
end

--[[ Steady state. The member's stored signature (includes/members.lua) equals this request, and
  the group is STABLE at the member's epoch with nothing due: the full path would only renew the
  lease and answer with the stored assignment, so this does exactly that. It runs before the helpers
  of the full path are defined, because on this path Lua's cost (creating those closures, decoding
  the record) outweighs the Redis commands. Anything else, including a malformed request, falls
  through to the full path, which validates it. ]]
do
  local signature = redis.call('HGET', K.steady, ARGV[10])
  if signature and signature == table.concat({ ARGV[11], ARGV[12], ARGV[13], ARGV[14], ARGV[15], ARGV[16], ARGV[17], ARGV[18], ARGV[19], ARGV[22] }, '\n')
      and ARGV[20] == '' and ARGV[21] == '' then
    local g = redis.call('HMGET', K.groupMeta, 'groupEpoch', 'assignmentEpoch', 'nextDeadlineAt', 'retainedNextAt', 'incarnation')
    local stream = redis.call('HMGET', K.streamMeta, 'shardCount', 'metadataVersion')
    local now = callNow
    local minLease = redis.call('ZRANGE', K.leases, 0, 0, 'WITHSCORES')
    -- The answer to the last renewal (or a later accepted one) came back in time
    -- (includes/answers.lua: a refusal proves no renewal); else the full path refuses the request.
    local answeredInTime = (ARGV[25] or '') == ''
      or (tonumber(ARGV[26]) or -1) >= (tonumber(redis.call('ZSCORE', K.leases, ARGV[10])) or math.huge) - tonumber(ARGV[16])
    local nextDeadlineAt = tonumber(g[3]) or 0
    local retainedNextAt = tonumber(g[4]) or 0
    if answeredInTime and g[1] == ARGV[11] and g[2] == ARGV[11] and stream[2] == ARGV[18]
        and minLease[2] and tonumber(minLease[2]) > now
        and (nextDeadlineAt == 0 or nextDeadlineAt > now) and (retainedNextAt == 0 or retainedNextAt > now)
        and redis.call('SCARD', K.unconverged) == 0 then
      local sessionTimeoutMs = tonumber(ARGV[16])
      redis.call('ZADD', K.leases, now + sessionTimeoutMs, ARGV[10])
      local interval = math.max(1, math.min(tonumber(ARGV[1]), math.floor(sessionTimeoutMs / 3)))
      return { ERR_NONE, '', tonumber(ARGV[11]), interval, sessionTimeoutMs, ARGV[19], '', '', tonumber(g[1]),
        tonumber(g[2]), 'STABLE', tonumber(stream[2]), tonumber(stream[1]), false, 0, '', g[5] or '0', now }
    end
  end
end

--- @include "includes/config"
--- @include "includes/time"
--- @include "includes/shardLists"
--- @include "includes/validate"
--- @include "includes/events"
--- @include "includes/wake"
--- @include "includes/waiting"
--- @include "includes/stream"
--- @include "includes/group"
--- @include "includes/members"
--- @include "includes/expiry"
--- @include "includes/reconcile"
--- @include "includes/memberCheck"
--- @include "includes/instance"
--- @include "includes/static"
--- @include "includes/answers"
--- @include "includes/unproven"
--- @include "includes/incarnation"
--- @include "includes/callContext"
--- @include "includes/respond"

local groupName = ARGV[9]
local memberId = ARGV[10]
local memberName = ARGV[12]
local rawOwned = ARGV[19]
local instanceId = ARGV[22] or ''
local isStatic = ARGV[23] == '1'

-- 1. Validate everything before touching anything.
if not isValidMemberId(memberId) then return errorResponse(ERR_INVALID_REQUEST, MEMBER_ID_RULE) end
if type(memberName) ~= 'string' or #memberName < 1 or #memberName > 256 or string.find(memberName, '%c') then
  return errorResponse(ERR_INVALID_REQUEST, 'memberName must be 1-256 printable characters')
end
local req, err = parseIntegers({
  { 'memberEpoch', 11, -1, MAX_EPOCH },
  { 'runtimeMaxConcurrency', 13, 1, 1000000 },
  { 'activeConsumerWorkers', 14, 0, 1000000 },
  { 'weight', 15, 1, 1000000 },
  { 'sessionTimeoutMs', 16, 10, MAX_TIMEOUT_MS },
  { 'rebalanceTimeoutMs', 17, 10, MAX_TIMEOUT_MS },
  { 'metadataVersion', 18, 0, MAX_EPOCH },
})
if not req then return errorResponse(ERR_INVALID_REQUEST, err) end
if not isValidInstanceId(instanceId) then return errorResponse(ERR_INVALID_REQUEST, INSTANCE_ID_RULE) end
local answeredAt, acceptedAt = nil, nil
if ARGV[25] ~= nil and ARGV[25] ~= '' then
  answeredAt, acceptedAt = tonumber(ARGV[25]), tonumber(ARGV[26] or '')
  if not answeredAt or answeredAt < 0 or answeredAt % 1 ~= 0 then
    return errorResponse(ERR_INVALID_REQUEST, 'answeredAt must be a Redis time in ms (0 before any answer)')
  end
  if not acceptedAt or acceptedAt < 0 or acceptedAt % 1 ~= 0 then
    return errorResponse(ERR_INVALID_REQUEST, 'acceptedAt must be a Redis time in ms (0 before any accepted answer), sent with answeredAt')
  end
end

local ctx = loadCallContext(K, memberId)
if not ctx then return errorResponse(ERR_GROUP_NOT_FOUND, NO_STREAM_MESSAGE) end
local stream, now, g, rec, minLease = ctx.stream, ctx.now, ctx.g, ctx.rec, ctx.minLease
local memberEpoch = req.memberEpoch

-- 2. Who is asking comes before what it reports: a member that is no longer ACTIVE, or whose epoch
-- is stale, or whose id another instance took over, is told so whatever its lists say (they may
-- name shards a shrink has deleted since). Every refusal here changes no state.
if memberEpoch > 0 then
  local code, message = checkMemberEpoch(K, rec, memberId, memberEpoch, now, minLease)
  if code ~= ERR_NONE then return errorResponse(code, message) end
  if rec.awayAt and not isOtherInstance(rec, instanceId) then
    return errorResponse(ERR_UNKNOWN_MEMBER_ID, 'static member ' .. memberId .. ' departed (stop()); rejoin with memberEpoch 0')
  end
  if isOtherInstance(rec, instanceId) then
    if rec.static then
      -- The old incarnation of a static member: a newer process of this memberInstanceId took over.
      return errorResponse(ERR_FENCED_INSTANCE_ID, 'static member ' .. memberId .. ' was taken over by a newer instance; this one stops for good')
    end
    return errorResponse(ERR_FENCED_MEMBER_EPOCH, 'member ' .. memberId .. ' was taken over by another instance; rejoin with memberEpoch 0')
  end
elseif isOtherInstance(rec, instanceId) and rec.state == 'ACTIVE' and (memberEpoch == -1 or isAlive(K, rec, now, minLease)) then
  -- A second live process with this id (or a leave from one): it must never share the id's
  -- ownership, and must not end the membership of the instance that holds it. A static member's
  -- restart is the exception once the instance holding it fell silent: that one crashed (or hangs),
  -- and the restart takes over, fencing it (includes/static.lua).
  local staticRestart = memberEpoch == 0 and isStatic and rec.static
  if staticRestart and not staticInstanceSilent(K, cfg, rec, now) then
    return errorResponse(ERR_FENCED_INSTANCE_ID, 'static member ' .. memberId .. ' is held by a live instance that still heartbeats; '
      .. 'a restarted instance takes over once the old one has been silent for ' .. staticTakeoverAfterMs(cfg, rec) .. ' ms')
  elseif not staticRestart then
    return errorResponse(ERR_FENCED_INSTANCE_ID, 'memberId ' .. memberId .. ' is in use by another live instance of group '
      .. groupName .. '; give every member process its own memberId')
  end
end

-- 2b. A member whose answers come back late changes nothing (SPEC 10.2, includes/answers.lua): its
-- lease runs out instead of being renewed for good. A leave is always taken: it frees shards.
-- Taken by its renewal rule, a request also proves that an answer to this member's last renewal
-- reached it in time: that proves a join (includes/unproven.lua). A caller that does not track its
-- answers proves nothing and is trusted, as before.
local renewalProven = not answeredAt
if answeredAt and memberEpoch ~= -1 then
  local why
  why, renewalProven = untimelyAnswers(K, rec, instanceId, answeredAt, acceptedAt, now, req.sessionTimeoutMs)
  if why then return errorResponse(ERR_NO_TIMELY_ANSWER, why) end
end
-- After step 2: a refusal there is the truth whatever the member's answers (a stale epoch is told
-- FENCED, not NO_TIMELY_ANSWER, so it drops its shards at once), and changes nothing either.

-- The steady-state report repeats the stored list exactly (canonical CSV): it is valid and true as
-- it stands, so it needs neither parsing nor the ownership check.
local steadyReport = memberEpoch > 0 and rec ~= nil and rawOwned == rec.owned and ARGV[20] == '' and ARGV[21] == ''
local owned, revokingReport, acked = {}, {}, {}
if not steadyReport then
  owned, err = parseShardList('owned', rawOwned, stream.shardCount)
  if not owned then return errorResponse(ERR_INVALID_REQUEST, err) end
  revokingReport, err = parseShardList('revoking', ARGV[20], stream.shardCount)
  if not revokingReport then return errorResponse(ERR_INVALID_REQUEST, err) end
  acked, err = parseShardList('ackedRevocations', ARGV[21], stream.shardCount)
  if not acked then return errorResponse(ERR_INVALID_REQUEST, err) end
  if memberEpoch > 0 then
    local violation = ownershipViolation(K, rec, owned)
    if violation then return errorResponse(ERR_FENCED_MEMBER_EPOCH, violation) end
  end
end

-- 3. Accepted. Time-driven removals of other members come first, so this step sees them.
if not g then
  if memberEpoch == -1 then
    return { ERR_NONE, '', -1, cfg.heartbeatIntervalMs, req.sessionTimeoutMs, '', '', '', 0, 0, 'EMPTY',
      stream.metadataVersion, stream.count, false, 0, '', '0', now }
  end
  g = createGroup(K, groupName, now, stream)
  assignIncarnation(K, g)
end
local groupEpochBefore = g.groupEpoch
local expired = expireMembers(K, cfg, g, now, minLease)
if expired > 0 or (g.retainedNextAt ~= 0 and g.retainedNextAt <= now) then
  trimRetained(K, cfg, g, now)
end
if g.groupEpoch ~= groupEpochBefore then wakeMembers(cfg, memberId) end -- someone the assignment counted expired
if expired > 0 then rec = loadMember(K, memberId) end

-- A static member's leave keeps its membership: its shards wait, unread, for its next instance until
-- its lease runs out (includes/static.lua).
if memberEpoch == -1 and isStatic and rec and rec.state == 'ACTIVE' and rec.static then
  staticDepart(K, cfg, g, rec, now)
  return { ERR_NONE, '', -1, cfg.heartbeatIntervalMs, req.sessionTimeoutMs, '', '', '', g.groupEpoch,
    g.assignmentEpoch, groupState(K, g), stream.metadataVersion, stream.count, false, 0, '', g.incarnation, now }
end

-- Leave: shards are free at once; the record stays as LEFT until retention ends.
if memberEpoch == -1 then
  if rec and rec.state == 'ACTIVE' then
    removeMember(K, cfg, g, rec, 'LEFT', now, 'leave')
    trimRetained(K, cfg, g, now)
    wakeMembers(cfg, memberId)
  end
  return { ERR_NONE, '', -1, cfg.heartbeatIntervalMs, req.sessionTimeoutMs, '', '', '', g.groupEpoch,
    g.assignmentEpoch, groupState(K, g), stream.metadataVersion, stream.count, false, 0, '', g.incarnation, now }
end

local dirty = false
local mustReconcile = false
-- Set when this request is the join that left the member unproven: it cannot prove itself.
local joinedUnproven = false
if memberEpoch == 0 then
  if not rec then
    if renewalProven then bumpGroupEpoch(K, g, now) end
    rec = {
      id = memberId, name = memberName, state = 'ACTIVE', epoch = 0, prevEpoch = 0, known = 0,
      joinEpoch = g.groupEpoch, mv = req.metadataVersion, rmc = req.runtimeMaxConcurrency,
      acw = req.activeConsumerWorkers, weight = req.weight, st = req.sessionTimeoutMs,
      rt = req.rebalanceTimeoutMs, owned = '', revoking = '', pending = '', lastHb = now, waiting = true,
      leaseExp = now + req.sessionTimeoutMs, inst = instanceId, static = isStatic or nil,
    }
    indexWeight(K, memberId, req.weight)
    if not renewalProven then
      markUnproven(K, rec, now)
      joinedUnproven = true
    end
    appendEvent(K, cfg, g, 'MEMBER_JOINED', memberId, memberName)
  elseif rec.state == 'ACTIVE' and rec.waiting and rec.owned == '' and rec.revoking == '' then
    -- The same join again: the member was told epoch 0 (it waits for its first target after the
    -- join) or the answer was lost. It holds nothing that a rejoin would drop.
  elseif isStatic and canRejoinStatically(K, g, rec, groupEpochBefore) then
    -- A static member's new instance takes the same assignment with a new epoch; nobody else moves.
    staticRejoin(K, cfg, g, rec, instanceId, now)
  else
    -- A rejoin: whatever the member held is dropped first (shard fencing protects those shards),
    -- and it waits for a target computed after this join, so its next epoch is strictly higher.
    -- Taken by the join rule only (an expired or left member, another instance's record), it is
    -- unproven from now on, and the assignment's input changes only if it counted before.
    local previousState = rec.state
    local counted = previousState == 'ACTIVE' and not rec.unproven
    if previousState == 'ACTIVE' then
      releaseShards(K, memberId, csvToList(rec.owned))
      releaseShards(K, memberId, csvToList(rec.revoking))
      redis.call('ZREM', K.deadlines, memberId)
    else
      redis.call('ZREM', K.retained, memberId)
    end
    rec.state, rec.owned, rec.revoking, rec.pending, rec.endedAt, rec.rvAt = 'ACTIVE', '', '', '', nil, nil
    rec.inst, rec.static, rec.awayAt = instanceId, isStatic or nil, nil
    -- The incarnation that joined before must not slip back in through the previous-epoch rule.
    rec.prevEpoch, rec.known, rec.waiting = -1, -1, true
    indexWeight(K, memberId, rec.weight)
    if counted or renewalProven then bumpGroupEpoch(K, g, now) end
    rec.joinEpoch = g.groupEpoch
    if renewalProven then
      rec.unproven = nil
      redis.call('SREM', K.unproven, memberId)
    else
      markUnproven(K, rec, now)
      joinedUnproven = true
    end
    appendEvent(K, cfg, g, 'MEMBER_REJOINED', memberId, previousState)
  end
  rec.awayAt = nil
  dirty, mustReconcile = true, not rec.staticRejoin
  rec.staticRejoin = nil
end
-- A later request taken by the renewal rule proves an unproven member's join; only now does the
-- assignment's input change (includes/unproven.lua).
if rec.unproven and renewalProven and not joinedUnproven then
  proveJoin(K, cfg, g, rec, now)
  dirty, mustReconcile = true, true
end

-- 4. What the member reports about itself.
if rec.name ~= memberName or rec.rmc ~= req.runtimeMaxConcurrency or rec.acw ~= req.activeConsumerWorkers
    or rec.mv ~= req.metadataVersion or rec.st ~= req.sessionTimeoutMs or rec.rt ~= req.rebalanceTimeoutMs
    or rec.weight ~= req.weight or (rec.inst or '') ~= instanceId then
  if rec.weight ~= req.weight and g.groupEpoch == groupEpochBefore and not rec.unproven then
    -- A weight is an input of the assignment.
    bumpGroupEpoch(K, g, now)
    appendEvent(K, cfg, g, 'MEMBER_WEIGHT_CHANGED', memberId, tostring(req.weight))
  end
  if rec.weight ~= req.weight then indexWeight(K, memberId, req.weight) end
  rec.name, rec.rmc, rec.acw, rec.mv = memberName, req.runtimeMaxConcurrency, req.activeConsumerWorkers, req.metadataVersion
  rec.st, rec.rt, rec.weight = req.sessionTimeoutMs, req.rebalanceTimeoutMs, req.weight
  -- Only reached for the record's own instance, or to adopt one (checked in step 2).
  rec.inst = instanceId
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
    -- The members waiting for these shards take them at their next heartbeat: that is now.
    local waiting = membersWaitingFor(K, released)
    if waiting then wakeOnly(cfg, memberId, waiting) else wakeMembers(cfg, memberId) end
    dirty, mustReconcile = true, true
  end
end

-- 6. Reconcile unless the member already matches the target at the assignment epoch. A member
-- whose target did not change in a commit stays converged and moves to the new epoch here.
-- An unproven member holds nothing and has no target: there is nothing to reconcile.
if not rec.unproven and (mustReconcile or rec.epoch < g.assignmentEpoch or isUnconverged(K, memberId)) then
  reconcileMember(K, cfg, g, rec, now)
  dirty = true
end
return memberResponse(K, cfg, g, rec, stream, req.metadataVersion, now, dirty)
