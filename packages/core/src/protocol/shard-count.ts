import { OPTION_RANGES } from './option-ranges';

/**
 * The most shards a stream may have: createStream, resizeShards, a member's and a producer's
 * `shardCount`, a message's `shardIndex` (below it). Its row in OPTION_RANGES says why; the edge
 * tier runs members at it (SPEC 10.7, test/edge/). Every script that lists a member's shards for a
 * command chunks the list (includes/callInChunks.lua).
 */
export const MAX_SHARD_COUNT: number = OPTION_RANGES.shardCount.max;
