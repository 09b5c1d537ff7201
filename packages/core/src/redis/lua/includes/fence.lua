-- Shard fencing (SPEC section 5). A shard's fencing token for a group is "<grantEpoch>:<memberId>",
-- stored in the shard's own hash slot. Acknowledgements and takeovers succeed only with the token
-- that is stored now, so a member that lost the shard can neither ack its entries nor take its work.
local function holdsFence(fenceKey, token)
  return redis.call('GET', fenceKey) == token
end
