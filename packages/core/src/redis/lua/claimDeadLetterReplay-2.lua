--[[
  claimDeadLetterReplay-2: marks one dead letter as being replayed, so that a second replay of it
  (run twice, run at once, or run after a crash) can tell that an earlier one may have written it.
  The marker is written before the replay's write and removed with the dead letter after it
  (dropDeadLetter-2.lua): a marker without its removal means "the write may have landed".

  KEYS[1]  the shard's dead-letter stream of the group   KEYS[2]  its replay markers (hash)
  ARGV[1]  the dead letter's id   ARGV[2]  after how many ms an existing marker is taken over
  Output: {'gone'} when no such dead letter (already replayed or purged);
          {'busy', ageMs} when another replay marked it less than ARGV[2] ms ago;
          {'claimed', previousMarkMs or '', nowMs} when this call holds it now (previousMarkMs: an
          earlier replay marked it then and did not finish: look for its write from there on).
]]
--- @include "includes/time"

local deadLetters, markers = KEYS[1], KEYS[2]
local deadLetterId, takeOverMs = ARGV[1], tonumber(ARGV[2])

if #redis.call('XRANGE', deadLetters, deadLetterId, deadLetterId) == 0 then
  redis.call('HDEL', markers, deadLetterId)
  return {'gone'}
end
local now = nowMs()
local previous = tonumber(redis.call('HGET', markers, deadLetterId) or '')
if previous and now - previous < takeOverMs then return {'busy', now - previous} end
redis.call('HSET', markers, deadLetterId, now)
return {'claimed', previous and tostring(previous) or '', now}
