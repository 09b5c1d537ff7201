-- Tells the group's members to heartbeat now (a PUBLISH on the group's wake channel): after a target
-- commit, a release of shards, or a removal, other members have something to pick up and should not
-- wait for their next heartbeat interval. The message is the member whose call caused it, so that
-- member can ignore its own news.
local function wakeMembers(cfg, memberId)
  if cfg.wakeChannel and cfg.wakeChannel ~= '' then redis.call('PUBLISH', cfg.wakeChannel, memberId) end
end
