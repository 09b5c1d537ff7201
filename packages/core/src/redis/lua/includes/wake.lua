-- Tells members to heartbeat now (a PUBLISH on the group's wake channel): after a target commit, a
-- release of shards, or a removal, some member has something to pick up and should not wait for its
-- next heartbeat interval. A wake-up is a hint: one that is lost (a subscriber reconnecting) costs
-- its member one heartbeat interval, never a shard, because every grant and revocation is decided by
-- the heartbeat that follows, whenever it comes.
--
-- The message is the member whose call caused it (it ignores its own news), then, separated by
-- spaces (member ids have none, includes/validate.lua), the members it is for; with none named it is
-- for every member but the publisher (redis/read-hubs/wake-hub.ts reads it).

-- Member ids named in one message: bounds the message (128-character ids: about 8 KiB) and the Lua
-- table handed to table.concat; more members take more messages.
local WAKE_TARGETS_PER_MESSAGE = 64

-- Every member of the group but `memberId`: someone must compute a target (a member left or
-- expired), or what changed is not one member's business (a cutover).
local function wakeMembers(cfg, memberId)
  if cfg.wakeChannel and cfg.wakeChannel ~= '' then redis.call('PUBLISH', cfg.wakeChannel, memberId) end
end

-- Only the members `targets` names (but `memberId`, which has the news in its answer): the others
-- have nothing to pick up, and a heartbeat of each would only load Redis and delay the ones that do.
local function wakeOnly(cfg, memberId, targets)
  if not cfg.wakeChannel or cfg.wakeChannel == '' then return end
  local chunk = {}
  for _, target in ipairs(targets) do
    if target ~= memberId then
      chunk[#chunk + 1] = target
      if #chunk == WAKE_TARGETS_PER_MESSAGE then
        redis.call('PUBLISH', cfg.wakeChannel, memberId .. ' ' .. table.concat(chunk, ' '))
        chunk = {}
      end
    end
  end
  if #chunk > 0 then redis.call('PUBLISH', cfg.wakeChannel, memberId .. ' ' .. table.concat(chunk, ' ')) end
end
