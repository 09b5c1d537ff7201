-- Request validation: pure, runs before any write, and names the field it refuses.
local function parseInteger(field, value, min, max)
  if type(value) ~= 'string' or #value > 16 or not string.match(value, '^%-?%d+$') then
    return nil, field .. ' must be an integer, got "' .. tostring(value) .. '"'
  end
  local n = tonumber(value)
  if n < min or n > max then
    return nil, field .. ' must be from ' .. min .. ' to ' .. max .. ', got ' .. value
  end
  return n
end

-- Parses "1,3,8" into a sorted list of distinct indices below shardCount; at most shardCount of them.
local function parseShardList(field, value, shardCount)
  if value == '' then return {} end
  if type(value) ~= 'string' or #value > shardCount * 7 + 7 or not string.match(value, '^%d[%d,]*$')
      or string.find(value, ',,', 1, true) or string.sub(value, -1) == ',' then
    return nil, field .. ' must be a comma-separated list of at most ' .. shardCount .. ' shard indices'
  end
  local list, seen = {}, {}
  for n in string.gmatch(value, '%d+') do
    local shard = tonumber(n)
    if shard >= shardCount then
      return nil, field .. ': shard index ' .. n .. ' is outside the readable shard set (0..' .. (shardCount - 1) .. ')'
    end
    if seen[shard] then
      return nil, field .. ': shard index ' .. n .. ' is listed twice'
    end
    seen[shard] = true
    list[#list + 1] = shard
  end
  table.sort(list)
  return list
end

local function isValidMemberId(value)
  return type(value) == 'string' and #value >= 1 and #value <= 128 and string.match(value, '^[%w%._%-]+$') ~= nil
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
