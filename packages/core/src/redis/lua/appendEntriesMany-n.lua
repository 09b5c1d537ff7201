--[[
  appendEntriesMany-n: one flush of a producer's merged sends on a single Redis (not a Cluster,
  where each shard's keys are in a slot of their own): several shards' appendEntries calls in one
  script call. Each shard's part is exactly an appendEntries-5.lua call, with its own keys,
  arguments, routing check, write log and sequence number, and its own reply. Redis saves little
  by it (the Lua call: about 350 of 25,000 instructions per entry of a flush of 8 shards with 8
  entries each, callgrind; the write log and the routing check stay per shard); the producer saves
  a pipeline per flush (ioredis copies every defined script onto each) and all but one command:
  Node CPU per sent entry at 64 in flight 11.3 µs against 13.9 µs (median of 5, same run).

  KEYS     5 per part, in order: a part's KEYS[1..5] of appendEntries-5.lua
  ARGV[1]  the number of parts P   ARGV[2..P+1] each part's number of arguments
  ARGV[P+2..] the parts' arguments in order: each an ARGV of appendEntries-5.lua

  Output: an array of P strings, each the part's appendEntries-5.lua reply, or 'FAILED\n0\n' and
  Redis' error when the part raised one (pcall): the parts before it keep their writes and replies,
  the parts after it run, as separate calls would. A resend of the whole call (a lost reply) is
  answered part by part from the write logs.
]]
--- @include "includes/time"
--- @include "includes/routing"
--- @include "includes/schedule"

-- KEYS and ARGV are this part's, shadowing the call's.
local function appendShard(KEYS, ARGV)
--- @include "includes/appendShard"
end

local parts = tonumber(ARGV[1])
local replies, at = {}, parts + 2
for part = 1, parts do
  local n = tonumber(ARGV[1 + part])
  local k = 5 * (part - 1)
  local ok, reply = pcall(appendShard, { KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5] }, { unpack(ARGV, at, at + n - 1) })
  if ok then
    replies[part] = reply
  else
    local message = type(reply) == 'table' and reply.err or reply
    replies[part] = 'FAILED\n0\n' .. (string.gsub(tostring(message), '\n', ' '))
  end
  at = at + n
end
return replies
