-- A shard fencing token "<incarnation>:<grantEpoch>:<memberId>" (redis/shard-client.ts fenceToken)
-- as two numbers to compare, incarnation first. A token from before incarnations ("<epoch>:<memberId>")
-- counts as incarnation 0. nil for anything else.
local function parseFenceToken(token)
  local incarnation, epoch = string.match(token, '^(%d+):(%d+):')
  if incarnation then return tonumber(incarnation), tonumber(epoch) end
  epoch = string.match(token, '^(%d+):')
  if epoch then return 0, tonumber(epoch) end
  return nil
end
