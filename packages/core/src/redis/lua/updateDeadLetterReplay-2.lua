--[[
  updateDeadLetterReplay-2: what a replay learned after it marked a dead letter
  (claimDeadLetterReplay-2.lua), written into the mark in the dead letter's own slot.

  'written': the replay's write landed at (shard, id): kept in the mark, so that a later replay (the
  delete after it failed) finds the write by the mark alone, whatever retention has done to the
  shard stream since (SPEC 10.6).
  'released': the replay's write surely did not land: the mark stops saying "busy" (at = 0); it is
  dropped if this replay was the first to mark the letter, kept otherwise (an earlier replay's write
  may still be found). Only by the replay that holds the mark (ARGV[3], its `at`).

  KEYS[1]  the shard's dead-letter stream of the group   KEYS[2]  its replay marks (hash)
  ARGV[1]  the dead letter's id   ARGV[2]  'written' or 'released'   ARGV[3]  the claim's nowMs
  ARGV[4]  the written shard   ARGV[5]  the written id   (for 'written')
  Output: 1 when the mark was updated, 0 when there was none (or, for 'released', another replay's).
]]
local marks, deadLetterId, op = KEYS[2], ARGV[1], ARGV[2]

local raw = redis.call('HGET', marks, deadLetterId)
if not raw or tonumber(raw) then return 0 end
local mark = cjson.decode(raw)
if op == 'written' then
  mark.shard, mark.id = tonumber(ARGV[4]), ARGV[5]
  redis.call('HSET', marks, deadLetterId, cjson.encode(mark))
  return 1
end
if tostring(mark.at) ~= ARGV[3] then return 0 end
if mark.first == mark.at and not mark.shard then
  redis.call('HDEL', marks, deadLetterId)
else
  mark.at = 0
  redis.call('HSET', marks, deadLetterId, cjson.encode(mark))
end
return 1
