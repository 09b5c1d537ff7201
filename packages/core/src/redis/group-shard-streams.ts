import type { KeyBuilder } from './keys';
import type { RedisClient } from './scripts';

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
 * heartbeat (an error, retried): the group is never registered without this step.
 */
export async function ensureGroupOnShardStreams(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  consumerGroup: string,
): Promise<void> {
  if ((await redis.sismember(keys.streamGroups(streamPrefix), consumerGroup)) === 1) return;
  const [count, span] = await redis.hmget(keys.streamMeta(streamPrefix), 'shardCount', 'shardSpan');
  if (count === null) return;
  const shards = Math.max(Number(count), Number(span ?? count));
  await Promise.all(
    Array.from({ length: shards }, (_, shardIndex) =>
      redis.xgroup('CREATE', keys.shardStream(streamPrefix, shardIndex), consumerGroup, '0', 'MKSTREAM').catch((error: Error) => {
        // BUSYGROUP: there already. WRONGTYPE: the shard's key is not a stream, so no trim can delete
        // from it either; the join goes on and that one shard's claim reports it (SPEC 10.8: one
        // shard's trouble must not keep the group from registering and reading its other shards).
        if (!error.message.includes('BUSYGROUP') && !error.message.startsWith('WRONGTYPE')) throw error;
      }),
    ),
  );
}
