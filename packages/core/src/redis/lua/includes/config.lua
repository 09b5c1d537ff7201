-- Coordinator settings, passed by the client as ARGV[1..8] on every call (redis/coordinator-client.ts).
local cfg = {
  heartbeatIntervalMs = tonumber(ARGV[1]),
  fastHeartbeatIntervalMs = tonumber(ARGV[2]),
  assignmentTimeoutMs = tonumber(ARGV[3]),
  assignmentDelayMs = tonumber(ARGV[4]),
  retentionMs = tonumber(ARGV[5]),
  retentionMaxCount = tonumber(ARGV[6]),
  eventLogMaxLen = tonumber(ARGV[7]),
  -- the group's pub/sub channel: members listening there heartbeat at once when told (includes/wake.lua)
  wakeChannel = ARGV[8],
}
