-- Shard lists travel and are stored as canonical CSV: ascending, no duplicates ("1,3,8"; "" = none).
-- Canonical form lets the steady-state heartbeat compare a report with the stored list as strings.
-- A CSV of numbers in brackets is a JSON array, and cjson parses it in C: many times faster than
-- a Lua loop over string.gmatch, which matters for lists of thousands of shards.
local function csvToList(csv)
  if not csv or csv == '' then return {} end
  return cjson.decode('[' .. csv .. ']')
end

local function listToCsv(list)
  table.sort(list)
  return table.concat(list, ',')
end

local function listToSet(list)
  local set = {}
  for i = 1, #list do set[list[i]] = true end
  return set
end

local function rangeCsv(count)
  local list = {}
  for i = 0, count - 1 do list[#list + 1] = i end
  return table.concat(list, ',')
end
