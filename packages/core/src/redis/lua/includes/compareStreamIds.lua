-- Compares two stream ids ("<ms>-<seq>") as Redis orders them, as decimal strings: Lua numbers
-- are doubles and would round a 64-bit sequence. Returns -1, 0 or 1.
local function compareStreamIds(a, b)
  local function parts(id)
    local dash = string.find(id, '-', 1, true)
    if not dash then return id, '0' end
    return string.sub(id, 1, dash - 1), string.sub(id, dash + 1)
  end
  local function decimal(x, y)
    if #x ~= #y then return #x < #y and -1 or 1 end
    if x == y then return 0 end
    return x < y and -1 or 1
  end
  local aMs, aSeq = parts(a)
  local bMs, bSeq = parts(b)
  local byMs = decimal(aMs, bMs)
  if byMs ~= 0 then return byMs end
  return decimal(aSeq, bSeq)
end
