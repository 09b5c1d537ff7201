-- Above this many members with a reconciliation ahead (K.unconverged), a release wakes the whole
-- group instead of looking for the members that wait for the released shards: the look-up reads the
-- target of each such member while Redis waits, and a group that large (a fresh start of every
-- member) heartbeats fast anyway while it converges.
local WAITING_LOOKUP_MAX_MEMBERS = 256

-- The members whose target holds one of `shards` (just released): the ones waiting for them. Only
-- members with a reconciliation ahead can wait for a shard; nil when there are too many to look at.
local function membersWaitingFor(K, shards)
  if redis.call('SCARD', K.unconverged) > WAITING_LOOKUP_MAX_MEMBERS then return nil end
  local ids = redis.call('SMEMBERS', K.unconverged)
  if #ids == 0 then return {} end
  -- At most WAITING_LOOKUP_MAX_MEMBERS ids: far below what unpack() may hand to a call.
  local targets = redis.call('HMGET', K.target, unpack(ids))
  local released = listToSet(shards)
  local waiting = {}
  for i = 1, #ids do
    for _, shard in ipairs(csvToList(targets[i] or '')) do
      if released[shard] then
        waiting[#waiting + 1] = ids[i]
        break
      end
    end
  end
  return waiting
end
