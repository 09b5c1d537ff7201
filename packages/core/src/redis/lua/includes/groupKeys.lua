-- The fourteen coordinator keys of one consumer group, in the order redis/keys.ts passes them.
-- They share the stream prefix's hash tag, so every script here is atomic on Redis Cluster too.
local K = {
  streamMeta = KEYS[1],   -- hash: shardCount, metadataVersion, readableShardSet, writableShardSet, ...
  groups = KEYS[2],       -- set: consumer groups of the stream prefix
  groupMeta = KEYS[3],    -- hash: groupEpoch, assignmentEpoch, epochBumpedAt, leaseOwner, ...
  members = KEYS[4],      -- hash: memberId -> member record (JSON)
  leases = KEYS[5],       -- zset: ACTIVE memberId -> lease expiry (ms, Redis time)
  target = KEYS[6],       -- hash: memberId -> target shard list (CSV) at assignmentEpoch
  owners = KEYS[7],       -- hash: shardIndex -> memberId holding it (owned or revoking)
  unconverged = KEYS[8],  -- set: ACTIVE members whose current assignment differs from the target
  deadlines = KEYS[9],    -- zset: memberId -> deadline (ms) to acknowledge its revocations
  retained = KEYS[10],    -- zset: LEFT/EXPIRED memberId -> time it ended (ms), for retention
  events = KEYS[11],      -- stream: capped log of coordinator decisions
  weights = KEYS[12],     -- hash: ACTIVE memberId -> weight, only where it is not 1
  steady = KEYS[13],      -- hash: memberId -> steady-state signature (see heartbeat-14.lua)
  unproven = KEYS[14],    -- set: ACTIVE members whose join is not proven yet, left out of the
                          -- assignor's input (includes/answers.lua)
}
