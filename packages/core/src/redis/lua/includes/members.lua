-- Member records. A record is small JSON (its own shard lists as CSV), so a heartbeat decodes one
-- member, never the group. Fields: id, name, state, epoch, prevEpoch, known (the last epoch sent to
-- the member), joinEpoch (groupEpoch of its last join: it may use targets from then on), waiting
-- (joined, told epoch 0, not yet told a real epoch), mv, rmc, acw, weight, st, rt, owned, revoking,
-- pending (CSV), lastHb, leaseExp, endedAt (ms), inst (the instance id that joined last, see
-- includes/instance.lua), rvAt (shard -> when its revocation was asked, ms, see includes/reconcile.lua),
-- unproven (Redis time of a join not proven yet, see includes/unproven.lua).
--- @include "includes/callInChunks"
local function loadMember(K, memberId)
  local raw = redis.call('HGET', K.members, memberId)
  if not raw then return nil end
  return cjson.decode(raw)
end

-- The request fields of a steady-state heartbeat, joined as the client sends them. A member has a
-- signature only while a heartbeat repeating it needs nothing but a lease renewal (see heartbeat-14).
-- Stored fields never contain a newline, so an equal request string means equal fields.
local function steadySignature(rec)
  return table.concat({ rec.epoch, rec.name, rec.rmc, rec.acw, rec.weight, rec.st, rec.rt, rec.mv, rec.owned, rec.inst or '' }, '\n')
end

local function saveMember(K, rec)
  redis.call('HSET', K.members, rec.id, cjson.encode(rec))
  if rec.state == 'ACTIVE' and not rec.waiting and not rec.awayAt and rec.revoking == '' and rec.pending == '' and rec.known == rec.epoch then
    redis.call('HSET', K.steady, rec.id, steadySignature(rec))
  else
    redis.call('HDEL', K.steady, rec.id)
  end
end

-- Weights other than 1 are indexed, so the assignor's input needs no member record.
local function indexWeight(K, memberId, weight)
  if weight == 1 then
    redis.call('HDEL', K.weights, memberId)
  else
    redis.call('HSET', K.weights, memberId, weight)
  end
end

-- In a STABLE group nobody is unconverged: one SCARD answers for everyone.
local function isUnconverged(K, memberId)
  return redis.call('SCARD', K.unconverged) > 0 and redis.call('SISMEMBER', K.unconverged, memberId) == 1
end

-- Moves a member to a new epoch. The epoch it knew stays acceptable as its previous epoch, so a
-- member that missed the answer carrying the new epoch is not fenced for it (SPEC section 3).
local function setMemberEpoch(rec, epoch)
  if rec.known == rec.epoch then rec.prevEpoch = rec.epoch end
  rec.epoch = epoch
end

-- Frees the given shards in the owner index where this member still holds them (up to every shard
-- of the stream).
local function releaseShards(K, memberId, list)
  if #list == 0 then return end
  local holders = callInChunks({ 'HMGET', K.owners }, list)
  for i = 1, #list do
    if holders[i] == memberId then redis.call('HDEL', K.owners, list[i]) end
  end
end

-- Leave or expiry: the member's shards are free at once (shard fencing stops a zombie from using
-- them), its record is kept for history until retention ends, and the assignment input changed,
-- unless the member was unproven (includes/unproven.lua): it was no part of that input.
local function removeMember(K, cfg, g, rec, state, now, reason)
  local wasAssignable = not rec.unproven
  local leaseExp = tonumber(redis.call('ZSCORE', K.leases, rec.id)) or now
  releaseShards(K, rec.id, csvToList(rec.owned))
  releaseShards(K, rec.id, csvToList(rec.revoking))
  rec.state = state
  rec.owned, rec.revoking, rec.pending, rec.rvAt = '', '', '', nil
  rec.leaseExp = leaseExp
  rec.lastHb = leaseExp - rec.st
  rec.endedAt = now
  redis.call('ZREM', K.leases, rec.id)
  redis.call('HDEL', K.weights, rec.id)
  redis.call('ZREM', K.deadlines, rec.id)
  redis.call('SREM', K.unconverged, rec.id)
  redis.call('SREM', K.unproven, rec.id)
  rec.unproven = nil
  redis.call('ZADD', K.retained, now, rec.id)
  if g.retainedNextAt == 0 or g.retainedNextAt > now + cfg.retentionMs then
    g.retainedNextAt = now + cfg.retentionMs
    redis.call('HSET', K.groupMeta, 'retainedNextAt', g.retainedNextAt)
  end
  saveMember(K, rec)
  if g.leaseOwner == rec.id then setAssignmentLease(K, g, '', 0) end
  if wasAssignable then bumpGroupEpoch(K, g, now) end
  appendEvent(K, cfg, g, 'MEMBER_' .. state, rec.id, reason)
end
