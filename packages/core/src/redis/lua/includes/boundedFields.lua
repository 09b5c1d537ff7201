-- The entry fields a script writes, ARGV[first] to the end, or an error reply when there are more
-- than `max` values: a schedule's release unpacks each entry's fields, and more than an entry and
-- its deferral have would make that unpack fail on every turn, holding up the group's other
-- deferred entries on the shard (SPEC 10.7). The caller keeps each field once (ShardClient).
local function boundedFields(first, max, script)
  if #ARGV - first + 1 > max then
    return nil, redis.error_reply(string.format('%s: at most %d field values, got %d', script, max, #ARGV - first + 1))
  end
  local fields = {}
  for i = first, #ARGV do fields[#fields + 1] = ARGV[i] end
  return fields
end
