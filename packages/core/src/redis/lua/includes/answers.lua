-- SPEC 10.2: Redis and a member agree on whether the member is alive. Redis cannot see an answer
-- come back late (a slow reply direction, a request that got here in time), so the member tells it:
-- every request of a member that tracks its answers carries `answeredAt`, the Redis time of the
-- latest answer it received within its call timeout, and `acceptedAt`, the same for the latest
-- accepted answer (0 before any). Only an accepted answer proves a renewal: a refusal may be small
-- and come back in time while every answer that renews (and carries the assignment) comes late, so
-- a refusal received in time must not let the next request renew again. Redis renews only a member
-- whose answer to its last renewal, or a later accepted one, came back in time, so it renews at most
-- once more after the member's accepted answers began to come late, and expires the member a
-- session after that renewal. A member with no live lease here (joining, or expired) proves its
-- link first: an answer it got in time, accepted or refused, within the last third of the session
-- (what it waits for an answer); its first join is refused, with the Redis time that, answered in
-- time, is that proof. A refused request changes nothing. The second rule proves the link, not that
-- the answer to this join will come back in time: a join taken by it is unproven until a later
-- request passes the first (includes/unproven.lua).

-- Why the request must change nothing, or nil when the member's answers come in time; then also
-- whether they proved a renewal (the first rule: the answer to its last renewal, or a later
-- accepted one, reached it in time) rather than only the link (the second: a join).
local function untimelyAnswers(K, rec, instanceId, answeredAt, acceptedAt, now, sessionTimeoutMs)
  if rec and rec.state == 'ACTIVE' and not isOtherInstance(rec, instanceId) then
    local lease = tonumber(redis.call('ZSCORE', K.leases, rec.id))
    if lease and lease > now then
      local renewedAt = lease - rec.st
      if acceptedAt >= renewedAt then return nil, true end
      return 'member ' .. rec.id .. ' got no accepted answer in time since its lease was renewed ' .. (now - renewedAt)
        .. ' ms ago; nothing changed (a refusal received in time proves no renewal: its lease runs out unless an accepted answer comes back in time)'
    end
  end
  if answeredAt > 0 and now - answeredAt <= math.floor(sessionTimeoutMs / 3) then return nil, false end
  return 'member ' .. (rec and rec.id or '?') .. ' has no answer received in time within the last '
    .. math.floor(sessionTimeoutMs / 3) .. ' ms; nothing changed (this answer, received in time, is one)'
end
