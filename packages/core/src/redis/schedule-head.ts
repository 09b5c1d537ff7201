import type { RedisClient } from './scripts';

/**
 * How many entries a schedule (a sorted set by due time: a shard's delayed entries, or a group's
 * deferred retries on it) holds and when its first is due: its lowest score, Redis ms as the
 * writing script stored it; null when it is empty. Two commands on one key, side by side: what
 * describeGroup and the metrics show of a schedule.
 */
export async function readScheduleHead(redis: RedisClient, schedule: string): Promise<{ count: number; firstDueAt: number | null }> {
  const [count, first] = await Promise.all([redis.zcard(schedule), redis.zrange(schedule, '0', '0', 'WITHSCORES')]);
  return { count, firstDueAt: first.length === 2 ? Number(first[1]) : null };
}
