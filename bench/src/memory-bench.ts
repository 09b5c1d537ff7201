import { Redis } from 'ioredis';
import { CoordinatedMember, CoordinatorAdmin, CoordinatorClient } from '@redis-stream-coordinator/core';
import { ProtocolMember } from '@redis-stream-coordinator/core/testing';
import { redisUsedMemory } from './cpu';

export interface MemoryFigures {
  /** Node heap growth, and the process's RSS, with 64 members running (MiB). */
  heapMiB: number;
  rssMiB: number;
  /** Redis bytes of coordinator state per member and per shard. */
  redisBytesPerMember: number;
  redisBytesPerShard: number;
}

const gc = () => (globalThis as { gc?: () => void }).gc?.();

async function processMemoryOf64Members(url: string): Promise<{ heapMiB: number; rssMiB: number }> {
  const redis = new Redis(url);
  const streamPrefix = `memory-${Date.now()}`;
  await new CoordinatorAdmin(redis).createStream({ streamPrefix, shardCount: 256 });
  gc();
  const before = process.memoryUsage();
  const members = Array.from(
    { length: 64 },
    (_, i) => new CoordinatedMember(redis, { streamPrefix, consumerGroup: 'bench', memberId: `mem-${i}`, handler: () => undefined }),
  );
  await Promise.all(members.map((m) => m.start()));
  await new Promise((resolve) => setTimeout(resolve, 1000));
  gc();
  const after = process.memoryUsage();
  await Promise.all(members.map((m) => m.stop()));
  redis.disconnect();
  // RSS as a whole: a difference of RSS says more about the allocator than about the members.
  return { heapMiB: (after.heapUsed - before.heapUsed) / 2 ** 20, rssMiB: after.rss / 2 ** 20 };
}

/** Coordinator state only (no shard streams): a group's Redis memory as members and shards grow. */
async function coordinatorBytes(redis: Redis, members: number, shards: number): Promise<number> {
  const streamPrefix = `state-${members}-${shards}-${Date.now()}`;
  const before = await redisUsedMemory(redis);
  await new CoordinatorAdmin(redis).createStream({ streamPrefix, shardCount: shards });
  const coordinator = new CoordinatorClient(redis);
  const joined = Array.from({ length: members }, (_, i) => new ProtocolMember(coordinator, streamPrefix, 'bench', `state-member-${i}`));
  for (const member of joined) await member.join();
  for (const member of joined) await member.heartbeat();
  return (await redisUsedMemory(redis)) - before;
}

export async function memory(url: string): Promise<MemoryFigures> {
  const process64 = await processMemoryOf64Members(url);
  const redis = new Redis(url);
  const base = await coordinatorBytes(redis, 100, 1000);
  const moreMembers = await coordinatorBytes(redis, 200, 1000);
  const moreShards = await coordinatorBytes(redis, 100, 2000);
  redis.disconnect();
  return {
    ...process64,
    redisBytesPerMember: (moreMembers - base) / 100,
    redisBytesPerShard: (moreShards - base) / 1000,
  };
}
