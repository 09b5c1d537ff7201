-- Lua keeps every value unpack() returns, and every argument of a redis.call, on its C stack, which
-- Redis' Lua 5.1 caps at LUAI_MAXCSTACK (8000 slots): past about 8,000 values a script fails with
-- "too many results to unpack". A list whose length a user controls (the entry ids of a batch, the
-- shards of a stream) therefore goes to Redis in chunks of CALL_CHUNK_SIZE values (SPEC 10.7), well
-- under the cap and even, so field/value pairs are never split.
local CALL_CHUNK_SIZE = 1000

-- redis.call(head[1], head[2], ..., list[first..last]) as one call per chunk of the list. Returns the
-- replies joined: integer replies added up (XACK, HDEL, HSET, SADD), array replies concatenated in
-- order (HMGET, XCLAIM). An error in a chunk raises as redis.call does; the chunks before it stay done.
local function callInChunks(head, list, first, last)
  first, last = first or 1, last or #list
  local sum, joined = 0, nil
  for from = first, last, CALL_CHUNK_SIZE do
    local args = {}
    for i = 1, #head do args[i] = head[i] end
    for i = from, math.min(from + CALL_CHUNK_SIZE - 1, last) do args[#args + 1] = list[i] end
    local reply = redis.call(unpack(args))
    if type(reply) == 'table' then
      joined = joined or {}
      for i = 1, #reply do joined[#joined + 1] = reply[i] end
    else
      sum = sum + reply
    end
  end
  return joined or sum
end
