import type { KeyBuilder } from '../redis/keys';
import { findGroupInfo, isNoSuchKey, trustedLag } from '../redis/responses';
import { readScheduleHeads } from '../redis/schedule-head';
import type { RedisClient } from '../redis/scripts';
import type { ShardStats } from './group-description';

const LAG_PAGE = 1000;

/**
 * Lag and pending of the group on one shard stream (zero when the stream or group does not exist
 * yet), and what waits in the shard's schedule and the group's deferred retries and parked entries (SPEC 9.6).
 */
export async function shardStats(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  shardIndex: number,
  consumerGroup: string,
): Promise<ShardStats> {
  const [streamStats, { scheduled, deferred, parked }] = await Promise.all([
    streamStatsOf(redis, keys, streamPrefix, shardIndex, consumerGroup),
    readScheduleHeads(
      redis,
      keys.shardSchedule(streamPrefix, shardIndex),
      keys.shardDeferred(streamPrefix, shardIndex, consumerGroup),
      keys.shardDeferredKeys(streamPrefix, shardIndex, consumerGroup),
    ),
  ]);
  return {
    ...streamStats,
    scheduled: scheduled.count,
    deferred: deferred.count,
    parked,
    nextDueAt: { scheduled: scheduled.firstDueAt, deferred: deferred.firstDueAt },
  };
}

async function streamStatsOf(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  shardIndex: number,
  consumerGroup: string,
): Promise<{ lag: number; pending: number }> {
  const stream = keys.shardStream(streamPrefix, shardIndex);
  let reply: unknown;
  let last: [string, string[]][];
  try {
    [reply, last] = await Promise.all([redis.xinfo('GROUPS', stream), redis.xrevrange(stream, '+', '-', 'COUNT', 1)]);
  } catch (error) {
    if (isNoSuchKey(error)) return { lag: 0, pending: 0 };
    throw error;
  }
  const info = findGroupInfo(reply, consumerGroup);
  if (info) {
    // Where Redis cannot tell the lag (after deletions, trimming or a restart), count what is
    // after the group's last-delivered id instead.
    const lag = trustedLag(info, last[0]?.[0]);
    return { lag: lag ?? (await countAfter(redis, stream, info.lastDelivered)), pending: info.pending };
  }
  // The group has never read this shard: all of it is lag.
  return { lag: await redis.xlen(stream), pending: 0 };
}

/** Entries after `afterId` in a stream, counted a page at a time. */
async function countAfter(redis: RedisClient, stream: string, afterId: string): Promise<number> {
  let count = 0;
  let cursor = afterId;
  for (;;) {
    const page = await redis.xrange(stream, `(${cursor}`, '+', 'COUNT', LAG_PAGE);
    count += page.length;
    if (page.length < LAG_PAGE) return count;
    cursor = page[page.length - 1][0];
  }
}
