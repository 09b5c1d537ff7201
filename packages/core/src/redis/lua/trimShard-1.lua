--[[
  trimShard-1: retention of one shard stream (CoordinatorAdmin.trim). In one atomic step, so that no
  group can read, claim or be created between the look and the trim: finds, for every consumer group
  on the stream, the lowest id it still needs (the lower of its oldest pending entry and the first
  entry after its last-delivered id, which a reset may have moved back below it), and deletes with
  XTRIM MINID everything below the lowest of those. Never past a pending entry, never an entry a
  group has not been delivered or was reset to read again (SPEC 10.6).

  KEYS[1]  the shard stream
  ARGV[1]  1 for a dry run (nothing deleted)   ARGV[2]  maxLen for a stream no group reads (0: none)
  ARGV[3]  n, the prefix's registered consumer groups   ARGV[4..3+n]  their names
  Output: {'missing'} no such stream;
          {'unread', group} a registered group has no Redis group on it yet (it would read from 0);
          {'no-group'} no group reads it and no maxLen: left alone;
          {'maxlen', '', count} trimmed to maxLen (no group reads it); a dry run counts what it would;
          {'trim', limitingGroup, count, minId} trimmed below minId ('' : every entry was delivered
          and acknowledged by every group); a dry run returns count -1 (the caller counts).
]]
--- @include "includes/compareStreamIds"

local stream = KEYS[1]
local dryRun, maxLen, registered = ARGV[1] == '1', tonumber(ARGV[2]), tonumber(ARGV[3])

if redis.call('EXISTS', stream) == 0 then return {'missing'} end

local onStream = {}
local names = {}
for _, info in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local fields = {}
  for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
  onStream[fields['name']] = fields
  names[#names + 1] = fields['name']
end
for i = 1, registered do
  local group = ARGV[3 + i]
  if not onStream[group] then return {'unread', group} end
end

if #names == 0 then
  if maxLen <= 0 then return {'no-group'} end
  if dryRun then return {'maxlen', '', math.max(0, redis.call('XLEN', stream) - maxLen)} end
  return {'maxlen', '', redis.call('XTRIM', stream, 'MAXLEN', maxLen)}
end

-- minId nil: this group needs nothing that is in the stream now.
local minId, limiting = nil, ''
table.sort(names)
for _, group in ipairs(names) do
  local fields = onStream[group]
  -- Both, and the lower of them (SPEC 10.6): a reset (XGROUP SETID) can move the last-delivered id
  -- below the oldest pending entry, and everything from it on is to be read again.
  local after = redis.call('XRANGE', stream, '(' .. fields['last-delivered-id'], '+', 'COUNT', 1)[1]
  local needs = after and after[1] or nil
  if tonumber(fields['pending']) > 0 then
    local oldestPending = redis.call('XPENDING', stream, group)[2]
    if not needs or compareStreamIds(oldestPending, needs) < 0 then needs = oldestPending end
  end
  if needs and (not minId or compareStreamIds(needs, minId) < 0) then
    minId, limiting = needs, group
  end
end

if not minId then
  -- Every group has had and acknowledged every entry: all of it goes (the stream and its groups stay).
  if dryRun then return {'trim', names[1], redis.call('XLEN', stream), ''} end
  return {'trim', names[1], redis.call('XTRIM', stream, 'MAXLEN', 0), ''}
end
if dryRun then return {'trim', limiting, -1, minId} end
return {'trim', limiting, redis.call('XTRIM', stream, 'MINID', minId), minId}
