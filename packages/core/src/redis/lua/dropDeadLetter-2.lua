--[[
  dropDeadLetter-2: deletes one dead letter and its replay marker together: the end of a replay
  (after its write landed) or a purge. Deleting what is already gone changes nothing, so it is safe
  to run twice.

  KEYS[1]  the shard's dead-letter stream of the group   KEYS[2]  its replay markers (hash)
  ARGV[1]  the dead letter's id
  Output: 1 when the dead letter was deleted now, 0 when it was already gone.
]]
local deadLetters, markers = KEYS[1], KEYS[2]
local deadLetterId = ARGV[1]

redis.call('HDEL', markers, deadLetterId)
return redis.call('XDEL', deadLetters, deadLetterId)
