--- @include "includes/callInChunks"
-- Member reconciliation (SPEC section 3), the CurrentAssignmentBuilder of this protocol.
-- With target T and owned O: O \ T must be revoked; while any revocation is unacknowledged the
-- member keeps its epoch and holds only O ∩ T. Once none is outstanding it moves to the
-- assignmentEpoch and takes every shard of T \ O that is free; the rest stays pending and is granted
-- by a later heartbeat as soon as its previous owner releases it (revoke-before-assign).
local function reconcileMember(K, cfg, g, rec, now)
  local A = g.assignmentEpoch
  -- A (re)joined member may use only targets computed after its join: an older target was computed
  -- without it, and a rejoin must end with a strictly higher epoch.
  local targetList = {}
  if A >= rec.joinEpoch then targetList = csvToList(redis.call('HGET', K.target, rec.id)) end
  local inTarget = listToSet(targetList)

  local owned = {}
  local revoking = csvToList(rec.revoking)
  local askedBefore = rec.rvAt or {}
  local newlyRevoked = {}
  for _, shard in ipairs(csvToList(rec.owned)) do
    if inTarget[shard] then
      owned[#owned + 1] = shard
    else
      revoking[#revoking + 1] = shard
      newlyRevoked[#newlyRevoked + 1] = shard
    end
  end
  if #newlyRevoked > 0 then
    appendEvent(K, cfg, g, 'SHARDS_REVOKING', rec.id, listToCsv(newlyRevoked))
  end

  local ownedSet = listToSet(owned)
  local wanted = {}
  for _, shard in ipairs(targetList) do
    if not ownedSet[shard] then wanted[#wanted + 1] = shard end
  end

  local pending = {}
  rec.rvAt = nil
  if #revoking > 0 then
    -- Each revocation counts from when it was asked: the deadline is the earliest outstanding
    -- ask time plus the rebalance timeout, so a revocation asked after the earlier ones were
    -- acknowledged gets the whole timeout (a shard without a recorded time was asked now).
    local askedAt, earliest = {}, nil
    for _, shard in ipairs(revoking) do
      local key = tostring(shard)
      askedAt[key] = askedBefore[key] or now
      if not earliest or askedAt[key] < earliest then earliest = askedAt[key] end
    end
    rec.rvAt = askedAt
    setRevocationDeadline(K, g, rec.id, earliest + rec.rt)
    pending = wanted
  else
    redis.call('ZREM', K.deadlines, rec.id)
    if A >= rec.joinEpoch and rec.epoch < A then setMemberEpoch(rec, A) end
    if #wanted > 0 then
      -- Up to every shard of the stream (a member alone in its group): in chunks.
      local holders = callInChunks({ 'HMGET', K.owners }, wanted)
      local granted = {}
      for i = 1, #wanted do
        if holders[i] then
          pending[#pending + 1] = wanted[i]
        else
          granted[#granted + 1] = wanted[i]
          granted[#granted + 1] = rec.id
          owned[#owned + 1] = wanted[i]
        end
      end
      if #granted > 0 then
        callInChunks({ 'HSET', K.owners }, granted)
        local shards = {}
        for i = 1, #granted, 2 do shards[#shards + 1] = granted[i] end
        appendEvent(K, cfg, g, 'SHARDS_ASSIGNED', rec.id, listToCsv(shards))
      end
    end
  end

  rec.owned = listToCsv(owned)
  rec.revoking = listToCsv(revoking)
  rec.pending = listToCsv(pending)
  if #revoking == 0 and #pending == 0 and A >= rec.joinEpoch and rec.epoch == A then
    redis.call('SREM', K.unconverged, rec.id)
  else
    redis.call('SADD', K.unconverged, rec.id)
  end
end
