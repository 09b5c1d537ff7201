-- Request validation: pure, runs before any write, and names the field it refuses.
-- tonumber and arithmetic rather than a pattern: patterns cost a microsecond each here, and this
-- runs for seven fields of every heartbeat. (n ~= n is NaN.)
local function parseInteger(field, value, min, max)
  local n = type(value) == 'string' and #value <= 16 and tonumber(value)
  if not n or n ~= n or n ~= math.floor(n) then
    return nil, field .. ' must be an integer, got "' .. tostring(value) .. '"'
  end
  if n < min or n > max then
    return nil, field .. ' must be from ' .. min .. ' to ' .. max .. ', got ' .. value
  end
  return n
end

-- Checks a decoded list of shard indices: integers in [0, shardCount), at most shardCount of them,
-- none twice. Sorts it in place. Returns the list, or nil and the message naming the field.
local function checkShardList(field, list, shardCount)
  if type(list) ~= 'table' or #list > shardCount then
    return nil, field .. ' must be a list of at most ' .. shardCount .. ' shard indices'
  end
  for i = 1, #list do
    local shard = list[i]
    if type(shard) ~= 'number' or shard ~= math.floor(shard) or shard < 0 then
      return nil, field .. ' must be a comma-separated list of at most ' .. shardCount .. ' shard indices'
    end
    if shard >= shardCount then
      return nil, field .. ': shard index ' .. shard .. ' is outside the readable shard set (0..' .. (shardCount - 1) .. ')'
    end
  end
  table.sort(list)
  for i = 2, #list do
    if list[i] == list[i - 1] then return nil, field .. ': shard index ' .. list[i] .. ' is listed twice' end
  end
  return list
end

-- Parses "1,3,8" into a sorted list of distinct indices below shardCount; at most shardCount of them.
local function parseShardList(field, value, shardCount)
  if value == '' then return {} end
  if type(value) ~= 'string' or #value > shardCount * 7 + 7 then
    return nil, field .. ' must be a comma-separated list of at most ' .. shardCount .. ' shard indices'
  end
  local ok, list = pcall(cjson.decode, '[' .. value .. ']')
  if not ok then
    return nil, field .. ' must be a comma-separated list of at most ' .. shardCount .. ' shard indices'
  end
  return checkShardList(field, list, shardCount)
end

local MEMBER_ID_RULE = 'memberId must be 1-128 characters of A-Z a-z 0-9 . _ -'

local function isValidMemberId(value)
  return type(value) == 'string' and #value >= 1 and #value <= 128 and string.match(value, '^[%w%._%-]+$') ~= nil
end

local INSTANCE_ID_RULE = 'instanceId must be 0-128 characters of A-Z a-z 0-9 . _ -'

local function isValidInstanceId(value)
  return type(value) == 'string' and #value <= 128 and string.match(value, '^[%w%._%-]*$') ~= nil
end

-- Parses integer fields given as { name, ARGV index, min, max }; returns a table by name, or nil and
-- the message of the first bad field.
local function parseIntegers(specs)
  local out = {}
  for _, spec in ipairs(specs) do
    local value, err = parseInteger(spec[1], ARGV[spec[2]], spec[3], spec[4])
    if not value then return nil, err end
    out[spec[1]] = value
  end
  return out
end

local MAX_EPOCH = 4503599627370496
local MAX_TIMEOUT_MS = 86400000
