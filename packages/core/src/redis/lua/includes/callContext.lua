-- What every member call reads before deciding anything: the stream, the group, the caller's
-- record, the earliest lease of the group, and Redis time. Read-only; nil when the stream has no
-- metadata (the caller answers GROUP_NOT_FOUND with NO_STREAM_MESSAGE).
local NO_STREAM_MESSAGE = 'the stream prefix has no metadata: create it with CoordinatorAdmin.createStream'

local function loadCallContext(K, memberId)
  local stream = loadStream(K)
  if not stream then return nil end
  local ctx = { stream = stream, now = nowMs(), g = loadGroup(K) }
  if ctx.g then
    ctx.rec = loadMember(K, memberId)
    ctx.minLease = earliestLease(K)
  end
  return ctx
end
