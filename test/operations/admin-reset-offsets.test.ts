import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import { type CommandVerdict, hookCommands } from '../support/command-hooks';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// SPEC 10.5: reset-offsets checks that no member is live, then moves each shard; each move
// re-checks in the shard's slot that no member has claimed the shard since the check.
const redis = useRedisServer();
const keys = new KeyBuilder();

/** A stream of 2 shards whose group "group" has read and acknowledged all 5 entries of each. */
async function readToTheEnd() {
  const streamPrefix = uniqueName('reset');
  await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 2 });
  await redis.client().sadd(keys.streamGroups(streamPrefix), 'group');
  await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
    Array.from({ length: 10 }, (_, seq) => ({ shardIndex: seq % 2, payload: { seq } })),
  );
  const last: string[] = [];
  for (const shard of [0, 1]) {
    const stream = keys.shardStream(streamPrefix, shard);
    await redis.client().xgroup('CREATE', stream, 'group', '0');
    const reply = (await redis.client().xreadgroup('GROUP', 'group', 'c', 'STREAMS', stream, '>')) as [string, [string, string[]][]][];
    const ids = reply[0][1].map(([id]) => id);
    await redis.client().xack(stream, 'group', ...ids);
    last.push(ids[ids.length - 1]);
  }
  return { streamPrefix, last };
}

const lastDelivered = async (streamPrefix: string, shard: number) =>
  (await new CoordinatorAdmin(redis.client()).shardPositions(streamPrefix, 'group'))[shard].lastDeliveredId;

describe('reset-offsets (SPEC 10.5)', () => {
  it('stops at a shard a member claimed after the check for live members: nothing it reads is moved under it', async () => {
    const { streamPrefix, last } = await readToTheEnd();
    const client = redis.client();
    const shard1 = keys.shardStream(streamPrefix, 1);
    let claimed = false;
    hookCommands(client, async (name, args): Promise<CommandVerdict> => {
      if (claimed || !args.includes(shard1) || (name !== 'xgroup' && name !== 'evalsha' && name !== 'eval')) return 'send';
      claimed = true;
      // A member joins and is granted shard 1 (claimShard-2.lua installs its token) just now.
      await redis.client().set(keys.shardFence(streamPrefix, 1, 'group'), '1:3:late-member');
      return 'send';
    });
    await expect(new CoordinatorAdmin(client).resetOffsets(streamPrefix, 'group', { to: 'earliest' })).rejects.toThrow(
      /shard 1: a member \(late-member\) claimed it since the check for live members.*shard 0 was reset, shard 1 and later ones were not/,
    );
    expect(claimed).toBe(true);
    expect(await lastDelivered(streamPrefix, 0)).toBe('0-0');
    expect(await lastDelivered(streamPrefix, 1)).toBe(last[1]);

    // Forced, it moves the shard whoever holds it (the member reads from there on).
    await new CoordinatorAdmin(redis.client()).resetOffsets(streamPrefix, 'group', { to: 'earliest', force: true });
    expect(await lastDelivered(streamPrefix, 1)).toBe('0-0');
  });

  it('creates the group where it has not read yet, at the target, in the same step', async () => {
    const { streamPrefix } = await readToTheEnd();
    await redis.client().xgroup('DESTROY', keys.shardStream(streamPrefix, 0), 'group');
    const result = await new CoordinatorAdmin(redis.client()).resetOffsets(streamPrefix, 'group', { to: 'latest' });
    expect(result.shards[0].from).toBeNull();
    expect(await lastDelivered(streamPrefix, 0)).toBe(result.shards[0].to);
  });
});
