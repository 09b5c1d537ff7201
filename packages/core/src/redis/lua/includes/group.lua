--- @include "includes/replayCutovers"
-- Group metadata: epochs, the assignment lease, and the group state derived from the member indexes.
local function loadGroup(K)
  local v = redis.call('HMGET', K.groupMeta, 'groupEpoch', 'assignmentEpoch', 'epochBumpedAt', 'leaseOwner',
    'leaseExpiresAt', 'retainedNextAt', 'nextDeadlineAt', 'incarnation')
  if not v[1] then return nil end
  return {
    groupEpoch = tonumber(v[1]),
    assignmentEpoch = tonumber(v[2]),
    epochBumpedAt = tonumber(v[3]) or 0,
    leaseOwner = v[4] or '',
    leaseExpiresAt = tonumber(v[5]) or 0,
    -- when the oldest LEFT/EXPIRED record is due to be forgotten (0: none retained)
    retainedNextAt = tonumber(v[6]) or 0,
    -- no revocation deadline falls before this (0: none pending); may be early, never late
    nextDeadlineAt = tonumber(v[7]) or 0,
    -- which life of the group this is (includes/incarnation.lua); '0' for a group from before it existed
    incarnation = v[8] or '0',
  }
end

-- A group created after resizes reads the shard streams from their beginning, so it crosses every
-- recorded resize in order, one cutover step each (includes/replayCutovers.lua): the first step is
-- its cutover now, the rest wait in `cutoverChain` for completeCutover-14.lua to install them.
-- The first step gets a metadataVersion of its own (the stream's, incremented): a group recreated
-- after its keys were lost may have had a cutover of the stream's current version in its former
-- life, and a member of that life still checking it (its heartbeat not yet refused) would complete
-- this step by that version without its conditions; and the new version makes every member that
-- answers re-read the group's cutover, whatever version it synced before.
local function createGroup(K, groupName, now, stream)
  redis.call('HSET', K.groupMeta, 'groupEpoch', 0, 'assignmentEpoch', 0, 'epochBumpedAt', now,
    'leaseOwner', '', 'leaseExpiresAt', 0, 'createdAt', now, 'updatedAt', now)
  redis.call('SADD', K.groups, groupName)
  local history = redis.call('HGET', K.streamMeta, 'resizeHistory')
  if history then
    local steps = replayCutovers(cjson.decode(history), stream.shardCount)
    local first = table.remove(steps, 1)
    stream.metadataVersion = redis.call('HINCRBY', K.streamMeta, 'metadataVersion', 1)
    redis.call('HSET', K.streamMeta, 'updatedAt', now)
    first.version = stream.metadataVersion
    redis.call('HSET', K.groupMeta, 'cutover', cjson.encode(first), 'readableShardSet', first.wait)
    if #steps > 0 then redis.call('HSET', K.groupMeta, 'cutoverChain', cjson.encode(steps)) end
    stream.readable, stream.readableIsFullRange = first.wait, false
  end
  return { groupEpoch = 0, assignmentEpoch = 0, epochBumpedAt = now, leaseOwner = '', leaseExpiresAt = 0, retainedNextAt = 0, nextDeadlineAt = 0 }
end

-- Every change of the assignment's input (join, rejoin, leave, expiry, weight) needs a new target.
local function bumpGroupEpoch(K, g, now)
  g.groupEpoch = g.groupEpoch + 1
  g.epochBumpedAt = now
  redis.call('HSET', K.groupMeta, 'groupEpoch', g.groupEpoch, 'epochBumpedAt', now, 'updatedAt', now)
end

local function setAssignmentLease(K, g, owner, expiresAt)
  g.leaseOwner = owner
  g.leaseExpiresAt = expiresAt
  redis.call('HSET', K.groupMeta, 'leaseOwner', owner, 'leaseExpiresAt', expiresAt, 'leaseEpoch', g.groupEpoch)
end

-- SPEC 2.2, derived rather than stored: EMPTY without live members or owners; ASSIGNING while the
-- target lags the group epoch; RECONCILING while some member has not converged; else STABLE.
-- `hasLiveMember` skips the EMPTY check when the caller is itself an ACTIVE member.
local function groupState(K, g, hasLiveMember)
  if not hasLiveMember and redis.call('ZCARD', K.leases) == 0 and redis.call('HLEN', K.owners) == 0 then
    return 'EMPTY'
  end
  if g.groupEpoch > g.assignmentEpoch then return 'ASSIGNING' end
  if redis.call('SCARD', K.unconverged) > 0 then return 'RECONCILING' end
  return 'STABLE'
end

-- The earliest lease expiry of the group, or nil: one read tells whether anyone has expired.
local function earliestLease(K)
  local first = redis.call('ZRANGE', K.leases, 0, 0, 'WITHSCORES')
  return tonumber(first[2])
end

-- The deadline of a member's revocations is its earliest outstanding revocation's ask time plus its
-- rebalance timeout (includes/reconcile.lua works that out), so it is set as given: it moves later
-- once the earlier revocations were acknowledged. nextDeadlineAt only ever moves earlier here (it
-- may be early, never late; expireMembers recomputes it).
local function setRevocationDeadline(K, g, memberId, deadline)
  redis.call('ZADD', K.deadlines, deadline, memberId)
  if g.nextDeadlineAt == 0 or deadline < g.nextDeadlineAt then
    g.nextDeadlineAt = deadline
    redis.call('HSET', K.groupMeta, 'nextDeadlineAt', deadline)
  end
end
