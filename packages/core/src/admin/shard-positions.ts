import type { KeyBuilder } from '../redis/keys';
import { findGroupInfo, isNoSuchKey } from '../redis/responses';
import type { RedisClient } from '../redis/scripts';

/** Where one group stands on one shard stream. */
export interface ShardPosition {
  shardIndex: number;
  /** Entries in the shard stream (0 when it does not exist). */
  length: number;
  /** The id of its newest entry ('0-0' when empty or missing). */
  lastEntryId: string;
  /** The group's last-delivered id on the shard; null when the group has not read it yet. */
  lastDeliveredId: string | null;
  pending: number;
  /** The oldest entry delivered and not acknowledged, with how long ago it was written (Redis time). */
  oldestPendingId: string | null;
  oldestPendingAgeMs: number | null;
}

/** The group's position on each shard 0..span-1, for `describe` and `reset-offsets`. Read-only. */
export async function readShardPositions(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  consumerGroup: string,
  shardSpan: number,
): Promise<ShardPosition[]> {
  const [seconds, micros] = await redis.time();
  const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  return Promise.all(
    Array.from({ length: shardSpan }, async (_, shardIndex): Promise<ShardPosition> => {
      const stream = keys.shardStream(streamPrefix, shardIndex);
      const empty = {
        shardIndex,
        length: 0,
        lastEntryId: '0-0',
        lastDeliveredId: null,
        pending: 0,
        oldestPendingId: null,
        oldestPendingAgeMs: null,
      };
      let groups: unknown;
      try {
        groups = await redis.xinfo('GROUPS', stream);
      } catch (error) {
        if (isNoSuchKey(error)) return empty;
        throw error;
      }
      const [length, last] = await Promise.all([redis.xlen(stream), redis.xrevrange(stream, '+', '-', 'COUNT', 1)]);
      const info = findGroupInfo(groups, consumerGroup);
      const position = { ...empty, length, lastEntryId: last[0]?.[0] ?? '0-0' };
      if (!info) return position;
      let oldestPendingId: string | null = null;
      if (info.pending > 0) oldestPendingId = ((await redis.xpending(stream, consumerGroup)) as [number, string | null])[1];
      return {
        ...position,
        lastDeliveredId: info.lastDelivered,
        pending: info.pending,
        oldestPendingId,
        oldestPendingAgeMs: oldestPendingId === null ? null : Math.max(0, now - Number(oldestPendingId.split('-')[0])),
      };
    }),
  );
}
