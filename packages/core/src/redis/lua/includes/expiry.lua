-- Time-driven removals, checked against Redis TIME by every coordinator call: members whose lease
-- ran out, and members that did not acknowledge a revocation within their rebalance timeout (so a
-- stuck handler cannot hold a shard hostage). Bounded per call; the rest go on the next call.
local EXPIRY_BATCH = 100

-- `minLease` is earliestLease(K) as read before; a steady group pays one read for both checks.
-- Returns how many members it removed (an unproven one's removal bumps no epoch).
local function expireMembers(K, cfg, g, now, minLease)
  local removed = 0
  if minLease and minLease <= now then
    local expired = redis.call('ZRANGEBYSCORE', K.leases, '-inf', now, 'LIMIT', 0, EXPIRY_BATCH)
    for i = 1, #expired do
      local rec = loadMember(K, expired[i])
      if rec then
        removeMember(K, cfg, g, rec, 'EXPIRED', now, 'session-timeout')
        removed = removed + 1
      end
    end
  end
  if g.nextDeadlineAt ~= 0 and g.nextDeadlineAt <= now then
    local overdue = redis.call('ZRANGEBYSCORE', K.deadlines, '-inf', now, 'LIMIT', 0, EXPIRY_BATCH)
    for i = 1, #overdue do
      local rec = loadMember(K, overdue[i])
      if rec and rec.state == 'ACTIVE' then
        removeMember(K, cfg, g, rec, 'EXPIRED', now, 'rebalance-timeout')
        removed = removed + 1
      else
        redis.call('ZREM', K.deadlines, overdue[i])
      end
    end
    local first = redis.call('ZRANGE', K.deadlines, 0, 0, 'WITHSCORES')
    g.nextDeadlineAt = tonumber(first[2]) or 0
    redis.call('HSET', K.groupMeta, 'nextDeadlineAt', g.nextDeadlineAt)
  end
  return removed
end

-- LEFT and EXPIRED records are history: kept for retentionMs and at most retentionMaxCount of them.
local function forgetMember(K, cfg, g, memberId)
  redis.call('ZREM', K.retained, memberId)
  local rec = loadMember(K, memberId)
  if rec and rec.state ~= 'ACTIVE' then
    redis.call('HDEL', K.members, memberId)
    redis.call('HDEL', K.steady, memberId)
    appendEvent(K, cfg, g, 'MEMBER_FORGOTTEN', memberId, rec.state)
  end
end

-- The count bound is kept whenever a record is added; the age bound when the oldest record is due
-- (the group's retainedNextAt, read with the group, so a steady heartbeat pays nothing for this).
local function trimRetained(K, cfg, g, now)
  if g.retainedNextAt == 0 then return end
  local count = redis.call('ZCARD', K.retained)
  local old = redis.call('ZRANGEBYSCORE', K.retained, '-inf', now - cfg.retentionMs, 'LIMIT', 0, EXPIRY_BATCH)
  for i = 1, #old do forgetMember(K, cfg, g, old[i]) end
  local excess = count - #old - cfg.retentionMaxCount
  if excess > 0 then
    local oldest = redis.call('ZRANGE', K.retained, 0, math.min(excess, EXPIRY_BATCH) - 1)
    for i = 1, #oldest do forgetMember(K, cfg, g, oldest[i]) end
  end
  local first = redis.call('ZRANGE', K.retained, 0, 0, 'WITHSCORES')
  g.retainedNextAt = first[2] and (tonumber(first[2]) + cfg.retentionMs) or 0
  redis.call('HSET', K.groupMeta, 'retainedNextAt', g.retainedNextAt)
end
