--[[
  appendEntries-5: writes a producer's entries for one shard, in order, if the shard still takes
  writes with the shard count the producer routed them with (SPEC 9.5, docs/resharding.md), at
  most once per write sequence number. A delayed entry goes to the shard's schedule instead of its
  stream (docs/runtime.md, Delayed delivery): releaseDue-8.lua moves it into the stream once due.

  KEYS[1]  the shard stream        KEYS[2]  the shard's routing marker (includes/routing.lua)
  KEYS[3]  this producer's write log on the shard (a string: its last call's sequence number, '\n',
           that call's reply)
  KEYS[4]  the shard's schedule (sorted set: schedule id -> due time, Redis ms)
  KEYS[5]  the shard's scheduled entries (hash: schedule id -> the entry's fields, cmsgpack; and
           the field SCHEDULE_SEQ, the last schedule id given)
  ARGV[1]  shardIndex   ARGV[2] the shard count the producer routed with
  ARGV[3]  MAXLEN ~ cap, or '' for none   ARGV[4] the producer's write sequence number on this shard
  ARGV[5]  a shard channel to SPUBLISH on once an entry is written, or '' for none: on a Redis
           Cluster members cannot block on many shards at once and poll them; this wakes them
           (the channel is in the stream's slot: `<stream>:wake`, keys.ts)
  ARGV[6]  the entries' layout: one digit per entry, its number of field values n (2 to 8)
  ARGV[7]  the entries' order groups, space-separated, one per entry: one key's entries in this call
           share a positive number, an entry without a key has 0. Once an entry of a group failed,
           the group's later entries are not attempted (a key's entry never lands after an earlier
           one of it failed), while the other groups' entries go on. Read only after a failure.
  ARGV[8]  the entries' due times: '' when no entry of the call is delayed (read no further), else
           space-separated, one per entry: '-' (now), '+<ms>' (that long after this script's Redis
           time) or '@<epoch ms>' (the sender's clock), with a trailing 'k' when the entry was
           routed by its key (its routed count is kept beside it: includes/schedule.lua); one not
           after Redis' now is written to the stream at once, a later one goes to the schedule
           (KEYS[4], KEYS[5])
  ARGV[9..] the entries' field values (field, value, ...), n per entry, in order

  Every argument costs Redis a Lua string and a table slot before the script runs, and again on
  the way into XADD: an entry takes only its field values, the per-entry numbers ride in ARGV[6],
  ARGV[7] and ARGV[8] (docs/benchmarks.md, section 7).

  Output: one string, lines separated by '\n':
    status, the shard count in effect (0 when the shard has no marker), then for 'OK':
    the outcome of each entry, space-separated: its id; 's<n>@<due ms>' it is scheduled, with its
    schedule id ('s' and the 16-digit zero-padded SCHEDULE_SEQ) and due time (Redis ms); 'E' its write failed (Redis' error is on
    one line after this one, one line per 'E', in order); 'S' not attempted (an earlier entry of
    its order group failed).
    'OK'         the shard takes these writes: each entry's outcome follows
    'REROUTE'    nothing written: the shard count in effect at Redis time is not the routed one (or
                 the shard is no longer writable); the producer re-routes these entries with it
    'UNROUTED'   nothing written: the shard has no routing marker, so this script cannot tell which
                 count is in effect (Redis lost its keys, or a stream from before markers); the
                 producer reads the metadata again, ensures the markers from it, and re-routes
    'SUPERSEDED' nothing written now: a resend of a call older than the producer's last one on this
                 shard (below)

  A call whose reply was lost is sent again by ioredis after it reconnects
  (autoResendUnfulfilledCommands, its default): the write log answers such a resend with the first
  run's reply and writes nothing, so the entries land once and the producer learns their ids. The
  log keeps the producer's last call only: a producer has at most one call in flight per shard
  (send-merger.ts), so the only call whose reply it waits for is its latest. An older one was given
  up past its deadline (its entries failed as maybe written, its reply ignored) and its resend came
  in order on the same connection before the later ones, so it ran already: 'SUPERSEDED' writes
  nothing. One string, written with its expiry in one command: the log expires WRITE_LOG_TTL_MS
  after the producer's last call on the shard.

  The check runs in the shard's own hash slot, atomically with the writes: once a shrink has
  switched, no producer (however late its request) can land an entry on a removed shard, and
  after a growth none can write a moved key to its old shard. Every shard of a stream has a marker
  from its creation on (createStream writes them), so a shard without one takes no writes: after
  Redis lost every key, a producer whose cached count predates the loss would otherwise split a
  key across the old count's shard and the recreated stream's.
]]
--- @include "includes/time"
--- @include "includes/routing"
--- @include "includes/schedule"
--- @include "includes/appendShard"
