import { afterEach, describe, expect, it } from 'vitest';
import {
  CoordinatedMember,
  CoordinatorAdmin,
  CoordinatorClient,
  KeyBuilder,
  MAX_SHARD_COUNT,
  StreamProducer,
} from '@redis-stream-coordinator/core';
import { ProtocolMember, settle } from '@redis-stream-coordinator/core/testing';
import { runScript } from '../../packages/core/src/redis/scripts';
import type { KeyedPayload } from '../support/handler-recorder';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// SPEC 10.7: a stream of MAX_SHARD_COUNT shards (createStream's maximum) works. The count comes
// from the constant createStream validates with, so a change of the range moves the test with it.
const redis = useRedisServer();
const keys = new KeyBuilder();

const started: CoordinatedMember<KeyedPayload>[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((m) => m.stop().catch(() => undefined)));
});

const sorted = (list: number[]) => [...list].sort((a, b) => a - b);
const everyShard = (count: number) => Array.from({ length: count }, (_, i) => i);

describe('the coordinator at MAX_SHARD_COUNT shards', () => {
  it(`a member alone owns all ${MAX_SHARD_COUNT}; a second member's join gives each half after a rebalance`, async () => {
    const streamPrefix = uniqueName('max-shards');
    // The stream's metadata only: heartbeats do not read the routing markers createStream writes
    // next (one per shard, for producers: seconds at this count, and not what this test is about).
    await runScript(redis.client(), 'createStream', [keys.streamMeta(streamPrefix)], [MAX_SHARD_COUNT]);
    const coordinator = new CoordinatorClient(redis.client());
    const first = new ProtocolMember(coordinator, streamPrefix, 'group', 'm1');
    await first.join();
    await settle([first]);
    expect(first.last?.errorMessage ?? '').toBe('');
    expect(sorted(first.owned)).toEqual(everyShard(MAX_SHARD_COUNT));

    const second = new ProtocolMember(coordinator, streamPrefix, 'group', 'm2');
    await second.join();
    await settle([first, second]);
    expect([first.owned.length, second.owned.length]).toEqual([MAX_SHARD_COUNT / 2, MAX_SHARD_COUNT / 2]);
    expect(sorted([...first.owned, ...second.owned])).toEqual(everyShard(MAX_SHARD_COUNT));

    // A leave frees every shard the member held at once (the owner index, in chunks).
    await second.leave();
    await settle([first]);
    expect(sorted(first.owned)).toEqual(everyShard(MAX_SHARD_COUNT));
  });
});

/**
 * Members that read: a stream of 4,096 shards, where heartbeats failed before ("too many results to
 * unpack" from about 4,000 shards) and the member owned nothing. Not MAX_SHARD_COUNT: a member
 * claims, takes over, sweeps and reads per shard, and one member holding 65,536 shards took over a
 * minute to handle its first entry (on a loaded 2-core machine): see docs/runtime.md, "Options".
 */
const MEMBER_SHARDS = 4096;

describe(`members of a stream of ${MEMBER_SHARDS} shards`, () => {
  it('one member owns all and consumes entries written to a few; a second member takes half after a rebalance, and both consume', async () => {
    const streamPrefix = uniqueName('many-shards');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: MEMBER_SHARDS });
    const handled = new Map<number, number[]>();
    const errors = new Set<string>();
    const aMember = async (memberId: string) => {
      const member = new CoordinatedMember<KeyedPayload>(redis.client(), {
        streamPrefix,
        consumerGroup: 'group',
        memberId,
        coordinator: { heartbeatIntervalMs: 200 },
        handler: (message) => {
          handled.set(message.shardIndex, [...(handled.get(message.shardIndex) ?? []), message.payload.seq]);
        },
      });
      member.on('error', (error) => errors.add(`${error.message} (${(error.cause as Error | undefined)?.message})`));
      started.push(member);
      await member.start();
      return member;
    };
    const owning = (member: CoordinatedMember<KeyedPayload>, count: number) => member.stats().ownedShards.length === count;
    const some = [0, 1, MEMBER_SHARDS / 2 - 1, MEMBER_SHARDS / 2, MEMBER_SHARDS - 1];
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const consumed = async (seq: number) => {
      await producer.sendBatch(some.map((shardIndex) => ({ payload: { seq }, shardIndex })));
      await pollUntil(`entry ${seq} handled on each of ${some}`, async () =>
        some.every((shard) => handled.get(shard)?.includes(seq)),
      ).catch((error: Error) => {
        throw new Error(`${error.message}; the members reported: ${[...errors].join('; ')}`);
      });
    };

    const first = await aMember('m1');
    await pollUntil(`m1 owns all ${MEMBER_SHARDS}`, async () => owning(first, MEMBER_SHARDS));
    await consumed(1);
    const second = await aMember('m2');
    await pollUntil('each member owns half', async () => owning(first, MEMBER_SHARDS / 2) && owning(second, MEMBER_SHARDS / 2));
    await consumed(2);
    expect([...errors]).toEqual([]);
  });
});
