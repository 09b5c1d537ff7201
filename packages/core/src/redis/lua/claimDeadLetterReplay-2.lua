--[[
  claimDeadLetterReplay-2: marks one dead letter as being replayed, so that a second replay of it
  (run twice, run at once, or run after a crash) can tell that an earlier one may have written it.
  The mark is written before the replay's write and removed with the dead letter after it
  (dropDeadLetter-2.lua): a mark without its removal means "the write may have landed".

  A mark is JSON: `first` (Redis ms when the first replay of this dead letter marked it), `at`
  (when the replay holding it now marked it; 0: released, see updateDeadLetterReplay-2.lua), and,
  once a replay knows where its write landed, `shard` and `id`. A take-over keeps `first` and the
  write's place, so that however many replays fail, the next one still looks back to the first
  (SPEC 10.6). A mark that is a bare number was left by an older version: first = at = it.

  KEYS[1]  the shard's dead-letter stream of the group   KEYS[2]  its replay marks (hash)
  ARGV[1]  the dead letter's id   ARGV[2]  after how many ms an existing mark is taken over
  Output: {'gone'} when no such dead letter (already replayed or purged);
          {'busy', ageMs} when another replay marked it less than ARGV[2] ms ago;
          {'claimed', firstMarkMs or '', nowMs, writtenShard or '', writtenId or ''} when this call
          holds it now (firstMarkMs: an earlier replay marked it then and did not finish: its write
          may have landed; writtenShard/writtenId: it did, there).
]]
--- @include "includes/time"

local deadLetters, marks = KEYS[1], KEYS[2]
local deadLetterId, takeOverMs = ARGV[1], tonumber(ARGV[2])

if #redis.call('XRANGE', deadLetters, deadLetterId, deadLetterId) == 0 then
  redis.call('HDEL', marks, deadLetterId)
  return {'gone'}
end
local now = nowMs()
local raw = redis.call('HGET', marks, deadLetterId)
local previous = nil
if raw then
  local number = tonumber(raw)
  if number then previous = { first = number, at = number } else previous = cjson.decode(raw) end
end
if previous and now - previous.at < takeOverMs then return {'busy', now - previous.at} end
local mark = { first = previous and previous.first or now, at = now }
if previous and previous.shard then mark.shard, mark.id = previous.shard, previous.id end
redis.call('HSET', marks, deadLetterId, cjson.encode(mark))
if not previous then return {'claimed', '', now, '', ''} end
return {'claimed', tostring(previous.first), now, mark.shard and tostring(mark.shard) or '', mark.id or ''}
