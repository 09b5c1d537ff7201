-- Whether a member call may proceed (SPEC section 3, as in KIP-848): the member must be ACTIVE with
-- a live lease, and its epoch must be current, or its previous epoch (the answer carrying the new one
-- may have been lost). Pure: an error here changes no state (invariant 4).
local function isAlive(K, rec, now, minLease)
  if not rec or rec.state ~= 'ACTIVE' then return false end
  -- every ACTIVE member has a lease; when the earliest one is still running, so is this one
  if not minLease or minLease <= now then
    local lease = tonumber(redis.call('ZSCORE', K.leases, rec.id))
    if not lease or lease <= now then return false end
  end
  -- a revocation deadline exists only while the member is revoking
  if rec.revoking == '' then return true end
  local deadline = tonumber(redis.call('ZSCORE', K.deadlines, rec.id))
  return deadline == nil or deadline > now
end

local function checkMemberEpoch(K, rec, memberId, memberEpoch, now, minLease)
  if not isAlive(K, rec, now, minLease) then
    local state = rec and rec.state or 'unknown'
    if rec and state == 'ACTIVE' then state = 'lease expired' end
    return ERR_UNKNOWN_MEMBER_ID, 'member ' .. memberId .. ' is not an active member of the group (' .. state .. '); rejoin with memberEpoch 0'
  end
  if memberEpoch > rec.epoch then
    return ERR_FENCED_MEMBER_EPOCH, 'memberEpoch ' .. memberEpoch .. ' is ahead of the member epoch ' .. rec.epoch
  end
  if memberEpoch < rec.epoch and memberEpoch ~= rec.prevEpoch then
    return ERR_FENCED_MEMBER_EPOCH, 'memberEpoch ' .. memberEpoch .. ' is stale: the member epoch is ' .. rec.epoch
  end
  return ERR_NONE
end

-- The coordinator does not trust the report: a member may report as owned only shards it holds
-- (granted, or still being revoked from it). Anything else is a zombie's or a buggy member's view.
local function ownershipViolation(K, rec, owned)
  if #owned == 0 then return nil end
  local held = listToSet(csvToList(rec.owned))
  for _, shard in ipairs(csvToList(rec.revoking)) do held[shard] = true end
  for _, shard in ipairs(owned) do
    if not held[shard] then
      if listToSet(csvToList(rec.pending))[shard] then
        return 'owned: shard ' .. shard .. ' is still pending for this member (its previous owner has not released it)'
      end
      local holder = redis.call('HGET', K.owners, shard)
      if holder then
        return 'owned: shard ' .. shard .. ' is owned by member ' .. holder
      end
      return 'owned: shard ' .. shard .. ' was not granted to this member'
    end
  end
  return nil
end
