--[[
  dropDeadLetter-2: deletes one dead letter and its replay mark together: the end of a replay
  (after its write landed) or a purge. Deleting what is already gone changes nothing, so it is safe
  to run twice.

  KEYS[1]  the shard's dead-letter stream of the group   KEYS[2]  its replay marks (hash)
  ARGV[1]  the dead letter's id
  Output: { 1 when the dead letter was deleted now, 0 when it was already gone; the shard and id of
  a replay's write the mark noted, or '' '' }: the caller removes that write's replay record
  (replayEntry-4.lua), which only a replay of this dead letter would read.
]]
local deadLetters, marks = KEYS[1], KEYS[2]
local deadLetterId = ARGV[1]

local raw = redis.call('HGET', marks, deadLetterId)
local shard, id = '', ''
if raw and not tonumber(raw) then
  local mark = cjson.decode(raw)
  if mark.shard then shard, id = tostring(mark.shard), mark.id end
end
redis.call('HDEL', marks, deadLetterId)
return { redis.call('XDEL', deadLetters, deadLetterId), shard, id }
