import { CoordinatorAdmin } from '@redis-stream-coordinator/core';
import { uniqueName, type RedisFixture } from './vitest-redis';

/** A new stream of one shard, its prefix unique to the test (`label` and a suffix). */
export async function oneShardStream(redis: RedisFixture, label: string): Promise<string> {
  const streamPrefix = uniqueName(label);
  await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 1 });
  return streamPrefix;
}
