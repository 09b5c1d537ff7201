-- Group metadata: epochs, the assignment lease, and the group state derived from the member indexes.
local function loadGroup(K)
  local v = redis.call('HMGET', K.groupMeta, 'groupEpoch', 'assignmentEpoch', 'epochBumpedAt', 'leaseOwner', 'leaseExpiresAt')
  if not v[1] then return nil end
  return {
    groupEpoch = tonumber(v[1]),
    assignmentEpoch = tonumber(v[2]),
    epochBumpedAt = tonumber(v[3]) or 0,
    leaseOwner = v[4] or '',
    leaseExpiresAt = tonumber(v[5]) or 0,
  }
end

local function createGroup(K, groupName, now)
  redis.call('HSET', K.groupMeta, 'groupEpoch', 0, 'assignmentEpoch', 0, 'epochBumpedAt', now,
    'leaseOwner', '', 'leaseExpiresAt', 0, 'createdAt', now, 'updatedAt', now)
  redis.call('SADD', K.groups, groupName)
  return { groupEpoch = 0, assignmentEpoch = 0, epochBumpedAt = now, leaseOwner = '', leaseExpiresAt = 0 }
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
local function groupState(K, g)
  if redis.call('ZCARD', K.leases) == 0 and redis.call('HLEN', K.owners) == 0 then return 'EMPTY' end
  if g.groupEpoch > g.assignmentEpoch then return 'ASSIGNING' end
  if redis.call('SCARD', K.unconverged) > 0 then return 'RECONCILING' end
  return 'STABLE'
end
