import type { KeyBuilder } from './keys';
import type { RedisClient } from './scripts';
import { perClient } from './connection/per-client';

/**
 * Makes a consumer group's Redis group exist, at '0', on every shard stream of the stream before the
 * group is registered (before the join heartbeat that creates it, heartbeat-14.lua). `trim` reads
 * the registered groups once and then trims shard by shard (trimShard-1.lua counts every group it
 * finds on the shard stream): a group registered between the two would otherwise be in neither,
 * and the trim would delete entries it is to read from 0 (SPEC 10.5, 10.6). Each shard stream is in
 * a slot of its own on a Cluster, so this is a step of its own, done first: once registered, the
 * group is in trim's list; before that, any shard trimmed after this step sees its Redis group.
 *
 * Only for a group not registered yet (one SISMEMBER per join otherwise). Creating it at '0' is
 * what the group's first claim of a shard (claimShard-2.lua) does anyway; one already there
 * (BUSYGROUP) is left where it is, and a shard key that is not a stream (WRONGTYPE) is skipped.
 * Nothing to do for a stream without metadata (the join is refused). Any other failure fails the
 * heartbeat (an error, retried): the group is never registered without this step. Concurrent
 * calls for one client, stream and group share one run (and its outcome).
 */
export function ensureGroupOnShardStreams(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  consumerGroup: string,
): Promise<void> {
  // The members of one process that join a new group at once (64 members started together) share
  // one run: each sent its own XGROUP CREATE per shard, 64 × 1,024 commands in flight at once, the
  // process's peak heap (docs/benchmarks.md, 6. Memory).
  const running = ensuresUnderWay(redis);
  const key = `${keys.streamGroups(streamPrefix)}\n${consumerGroup}`;
  let run = running.get(key);
  if (!run) {
    run = createOnEveryShard(redis, keys, streamPrefix, consumerGroup).finally(() => running.delete(key));
    running.set(key, run);
  }
  return run;
}

/**
 * XGROUP CREATEs in flight at once in one run: enough that a stream of MAX_SHARD_COUNT shards is
 * done in a few pipelined rounds, few enough that their commands and replies stay a small part of
 * the heap.
 */
const GROUP_CREATES_IN_FLIGHT = 256;

/** The runs under way, per client, by stream and group (one entry while a run is out, none after). */
const ensuresUnderWay = perClient((_: RedisClient) => new Map<string, Promise<void>>());

async function createOnEveryShard(redis: RedisClient, keys: KeyBuilder, streamPrefix: string, consumerGroup: string): Promise<void> {
  if ((await redis.sismember(keys.streamGroups(streamPrefix), consumerGroup)) === 1) return;
  const [count, span] = await redis.hmget(keys.streamMeta(streamPrefix), 'shardCount', 'shardSpan');
  if (count === null) return;
  const shards = Math.max(Number(count), Number(span ?? count));
  for (let from = 0; from < shards; from += GROUP_CREATES_IN_FLIGHT) {
    await Promise.all(
      Array.from({ length: Math.min(GROUP_CREATES_IN_FLIGHT, shards - from) }, (_, i) =>
        redis.xgroup('CREATE', keys.shardStream(streamPrefix, from + i), consumerGroup, '0', 'MKSTREAM').catch((error: Error) => {
          // BUSYGROUP: there already. WRONGTYPE: the shard's key is not a stream, so no trim can delete
          // from it either; the join goes on and that one shard's claim reports it (SPEC 10.8: one
          // shard's trouble must not keep the group from registering and reading its other shards).
          if (!error.message.includes('BUSYGROUP') && !error.message.startsWith('WRONGTYPE')) throw error;
        }),
      ),
    );
  }
}
