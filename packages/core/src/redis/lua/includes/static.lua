-- Static membership (Kafka KIP-345, docs/runtime.md "Static membership"). A member started with a
-- `memberInstanceId` uses it as its memberId and sends static = '1'. Its record (rec.static) then
-- outlives one process:
-- - its leave (stop()) departs instead (rec.awayAt): the membership and its shards stay until the
--   lease runs out, so the next instance finds them; the departed instance's own heartbeats are
--   refused from then on (UNKNOWN_MEMBER_ID), so only a join (of it or of a new instance) resumes;
-- - a join from a new instance takes over when the slot is free or the instance holding it fell
--   silent (no heartbeat for two heartbeat intervals: it crashed or hangs), and is refused with
--   FENCED_INSTANCE_ID while that instance still heartbeats (SPEC 9.4: a duplicate process never
--   shares the id);
-- - the takeover keeps the member's assignment and gives it a new epoch, without an ASSIGNING round:
--   the assignment's input did not change (same members, same weights), so the target is the same
--   and is restamped at a new groupEpoch = assignmentEpoch. The new epoch fences the old instance:
--   its heartbeats are refused (FENCED_INSTANCE_ID), and the new instance installs fencing tokens
--   with the new epoch on every shard before it reads, so the old one can no longer ack or
--   dead-letter. The other members only move to the new epoch at their next heartbeat.

-- How long the instance holding a static member must have been silent before a restart takes over:
-- two heartbeat intervals, so one late heartbeat of a live instance does not lose it its id.
local function staticTakeoverAfterMs(cfg, rec)
  local interval = math.max(1, math.min(cfg.heartbeatIntervalMs, math.floor(rec.st / 3)))
  return 2 * interval
end

-- Whether the instance holding this (ACTIVE) record sent no heartbeat for the takeover time. A
-- lease is renewed to `last heartbeat + sessionTimeoutMs` on every accepted heartbeat.
local function staticInstanceSilent(K, cfg, rec, now)
  if rec.awayAt then return true end
  local lease = tonumber(redis.call('ZSCORE', K.leases, rec.id))
  if not lease then return true end
  return now - (lease - rec.st) >= staticTakeoverAfterMs(cfg, rec)
end

-- A static member's stop(): it drained and acked, and keeps its membership for its next instance.
local function staticDepart(K, cfg, g, rec, now)
  rec.awayAt = now
  if g.leaseOwner == rec.id then setAssignmentLease(K, g, '', 0) end
  saveMember(K, rec)
  appendEvent(K, cfg, g, 'MEMBER_AWAY', rec.id, 'static member; lease ends ' .. (tonumber(redis.call('ZSCORE', K.leases, rec.id)) or now))
end

-- Whether a join may take the member's assignment as it is: the member holds exactly its target
-- (nothing revoking, nothing pending, not left behind by a commit) and no new target is being computed.
local function canRejoinStatically(K, g, rec, groupEpochBefore)
  return rec.static and rec.state == 'ACTIVE' and not rec.waiting and rec.revoking == '' and rec.pending == ''
    and g.groupEpoch == groupEpochBefore and g.groupEpoch == g.assignmentEpoch and g.assignmentEpoch >= rec.joinEpoch
    and not isUnconverged(K, rec.id)
end

-- The new instance takes the assignment with a new epoch. prevEpoch -1: the old instance's epoch is
-- not accepted as "the previous one" (SPEC section 3's lost-answer rule is for one instance only).
local function staticRejoin(K, cfg, g, rec, instanceId, now)
  bumpGroupEpoch(K, g, now)
  g.assignmentEpoch = g.groupEpoch
  redis.call('HSET', K.groupMeta, 'assignmentEpoch', g.assignmentEpoch)
  rec.epoch, rec.prevEpoch = g.assignmentEpoch, -1
  rec.inst, rec.awayAt, rec.staticRejoin = instanceId, nil, true
  appendEvent(K, cfg, g, 'MEMBER_STATIC_REJOINED', rec.id, rec.owned)
end
