/**
 * The most shards a stream may have: createStream, resizeShards, a member's and a producer's
 * `shardCount`, a message's `shardIndex` (below it). The coordinator is tested at it (SPEC 10.7,
 * test/coordinator/shard-count-extremes.test.ts): every script that lists a member's shards for a
 * command chunks the list (includes/callInChunks.lua).
 */
export const MAX_SHARD_COUNT = 65_536;
