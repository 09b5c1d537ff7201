-- The end of every successful member call: hand out the assignment lease when a target is due,
-- remember which epoch the member was told, and build the heartbeat response.
--
-- Response array (parsed by redis/responses.ts):
--  1 errorCode  2 errorMessage  3 memberEpoch  4 heartbeatIntervalMs  5 sessionTimeoutMs
--  6 assigned   7 revoke        8 pending      9 groupEpoch          10 assignmentEpoch
-- 11 state     12 metadataVersion             13 shardCount          14 readableShardSet or nil
-- 15 computeAssignment (0/1)   16 assignment input (JSON) or ''
-- 17 the group's incarnation (includes/incarnation.lua), the first part of every fencing token
-- 18 Redis time (ms) of this call: the member bounds Redis's clock with it to set its deadlines
--    (heartbeat-14.lua ARGV[24]). Every successful answer of the heartbeat script carries it.
-- 19 unproven (0/1): the member's join is not proven yet (includes/unproven.lua); absent from the
--    steady-state answer (18 elements), where it is 0.

local function assignmentInput(K, g, stream)
  local ids = assignableMembers(K)
  local weights = {}
  local flat = redis.call('HGETALL', K.weights)
  for i = 1, #flat, 2 do weights[flat[i]] = tonumber(flat[i + 1]) end
  local members = {}
  for i = 1, #ids do
    members[#members + 1] = ids[i]
    members[#members + 1] = weights[ids[i]] or 1
  end
  return cjson.encode({
    groupEpoch = g.groupEpoch,
    members = members,
    readableShardSet = loadReadable(K, stream),
    previousTarget = redis.call('HGETALL', K.target),
  })
end

-- A refusal says when it ran too: the member bounds Redis's clock with it, and one received in time
-- proves the member's link to a join, never a renewal (includes/answers.lua).
local function errorResponse(code, message)
  return { code, message, nowMs() }
end

local function memberResponse(K, cfg, g, rec, stream, reportedMv, now, dirty)
  local state = groupState(K, g, true)
  local compute = 0
  local interval = cfg.heartbeatIntervalMs
  if rec.unproven then
    -- Its next request, sent at once, proves its join if this answer reaches it in time
    -- (includes/unproven.lua); it computes no target, being no part of one.
    interval = 1
  elseif state == 'ASSIGNING' then
    interval = cfg.fastHeartbeatIntervalMs
    local leaseFree = g.leaseOwner == '' or g.leaseExpiresAt <= now or g.leaseOwner == rec.id
    local dueAt = g.epochBumpedAt + cfg.assignmentDelayMs
    if leaseFree and now >= dueAt then
      setAssignmentLease(K, g, rec.id, now + cfg.assignmentTimeoutMs)
      compute = 1
    elseif now < dueAt then
      interval = math.min(interval, math.max(1, dueAt - now))
    end
  elseif rec.revoking ~= '' or rec.pending ~= '' then
    interval = cfg.fastHeartbeatIntervalMs
  end
  interval = math.max(1, math.min(interval, math.floor(rec.st / 3)))

  -- A member that (re)joined and waits for a target computed after its join is told epoch 0: after a
  -- rejoin its stored epoch is also what its previous incarnation holds, and only that one may use it.
  -- An unproven member is told epoch 0 too: it waits for its proof, then for a target.
  local toldEpoch = rec.epoch
  if rec.unproven or rec.joinEpoch > g.assignmentEpoch then
    toldEpoch = 0
  elseif rec.known ~= rec.epoch or rec.waiting then
    rec.known, rec.waiting = rec.epoch, nil
    dirty = true
  end
  if dirty then saveMember(K, rec) end

  local readable = false
  if reportedMv ~= stream.metadataVersion then readable = loadReadable(K, stream) end
  local input = ''
  if compute == 1 then input = assignmentInput(K, g, stream) end
  return { ERR_NONE, '', toldEpoch, interval, rec.st, rec.owned, rec.revoking, rec.pending,
    g.groupEpoch, g.assignmentEpoch, state, stream.metadataVersion, stream.count, readable,
    compute, input, g.incarnation, now, rec.unproven and 1 or 0 }
end
