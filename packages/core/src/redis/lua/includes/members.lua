-- Member records. A record is small JSON (its own shard lists as CSV), so a heartbeat decodes one
-- member, never the group. Fields: id, name, state, epoch, prevEpoch, known (the last epoch sent to
-- the member), joinEpoch (groupEpoch of its last join: it may use targets from then on), mv, rmc,
-- acw, weight, st, rt, owned, revoking, pending (CSV), lastHb, leaseExp, endedAt (ms).
local function loadMember(K, memberId)
  local raw = redis.call('HGET', K.members, memberId)
  if not raw then return nil end
  return cjson.decode(raw)
end

local function saveMember(K, rec)
  redis.call('HSET', K.members, rec.id, cjson.encode(rec))
end

-- Moves a member to a new epoch. The epoch it knew stays acceptable as its previous epoch, so a
-- member that missed the answer carrying the new epoch is not fenced for it (SPEC section 3).
local function setMemberEpoch(rec, epoch)
  if rec.known == rec.epoch then rec.prevEpoch = rec.epoch end
  rec.epoch = epoch
end

-- Frees the given shards in the owner index where this member still holds them.
local function releaseShards(K, memberId, list)
  if #list == 0 then return end
  local holders = redis.call('HMGET', K.owners, unpack(list))
  for i = 1, #list do
    if holders[i] == memberId then redis.call('HDEL', K.owners, list[i]) end
  end
end

-- Leave or expiry: the member's shards are free at once (shard fencing stops a zombie from using
-- them), its record is kept for history until retention ends, and the assignment input changed.
local function removeMember(K, cfg, g, rec, state, now, reason)
  local leaseExp = tonumber(redis.call('ZSCORE', K.leases, rec.id)) or now
  releaseShards(K, rec.id, csvToList(rec.owned))
  releaseShards(K, rec.id, csvToList(rec.revoking))
  rec.state = state
  rec.owned, rec.revoking, rec.pending = '', '', ''
  rec.leaseExp = leaseExp
  rec.lastHb = leaseExp - rec.st
  rec.endedAt = now
  redis.call('ZREM', K.leases, rec.id)
  redis.call('ZREM', K.deadlines, rec.id)
  redis.call('SREM', K.unconverged, rec.id)
  redis.call('ZADD', K.retained, now, rec.id)
  saveMember(K, rec)
  if g.leaseOwner == rec.id then setAssignmentLease(K, g, '', 0) end
  bumpGroupEpoch(K, g, now)
  appendEvent(K, cfg, g, 'MEMBER_' .. state, rec.id, reason)
end
