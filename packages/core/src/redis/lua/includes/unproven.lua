-- SPEC 10.2, for a join: a member is never given shards whose assignment it cannot learn in time.
-- A join is taken on a fresh answer (includes/answers.lua, second rule), which proves the member's
-- link but not that the answer to this join will reach it in time: refusals are small and may come
-- back in time while every accepted answer (it carries the assignment) comes late. Taken as any
-- other member, it would be given target shards, the others would revoke them to it, and nobody
-- would read them until it expired; then it would join again, once per session timeout.
--
-- So such a join makes the member unproven (rec.unproven = the Redis time of the join, and in
-- K.unproven): ACTIVE with a lease (it heartbeats, and expires as any member), told epoch 0 and to
-- heartbeat again at once, but left out of the assignor's input: no target, nothing revoked for it,
-- never the assignment lease, and no groupEpoch bump for its join, its weight, its leave or its
-- expiry (the input did not change). A later request of it that Redis takes by the first rule of
-- includes/answers.lua proves the join: the answer to it, or a later accepted one, reached the
-- member in time. Only then does the input change (groupEpoch bumped, MEMBER_JOIN_PROVEN), and the
-- member takes targets computed from then on. A join taken by the first rule (a member of this
-- instance, ACTIVE with a live lease, whose last renewal's answer came in time), or from a caller
-- that does not track its answers, is proven at once.

local function markUnproven(K, rec, now)
  rec.unproven = now
  redis.call('SADD', K.unproven, rec.id)
end

local function proveJoin(K, cfg, g, rec, now)
  local joinedAt = rec.unproven
  rec.unproven = nil
  redis.call('SREM', K.unproven, rec.id)
  bumpGroupEpoch(K, g, now)
  rec.joinEpoch = g.groupEpoch
  appendEvent(K, cfg, g, 'MEMBER_JOIN_PROVEN', rec.id, 'an answer came back in time, ' .. (now - joinedAt) .. ' ms after the join')
end

-- The members the assignor places shards on (and a target may name): every ACTIVE member (each has
-- a lease) but the unproven ones. In lease order, as before.
local function assignableMembers(K)
  local ids = redis.call('ZRANGE', K.leases, 0, -1)
  if redis.call('SCARD', K.unproven) == 0 then return ids end
  local unproven = listToSet(redis.call('SMEMBERS', K.unproven))
  local assignable = {}
  for i = 1, #ids do
    if not unproven[ids[i]] then assignable[#assignable + 1] = ids[i] end
  end
  return assignable
end
