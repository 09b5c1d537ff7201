import { describe, expect, it } from 'vitest';
import { CoordinatorClient, KeyBuilder, MAX_SHARD_COUNT } from '@redis-stream-coordinator/core';
import { ProtocolMember, settle } from '@redis-stream-coordinator/core/testing';
import { runScript } from '../../packages/core/src/redis/scripts';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// SPEC 10.7: the coordinator's scripts at MAX_SHARD_COUNT shards (createStream's maximum), without
// members' reads. The count comes from OPTION_RANGES, so a change of the range moves the test with
// it; members reading a stream that size are the edge tier's (test/edge/scale-cases.ts).
const redis = useRedisServer();
const keys = new KeyBuilder();

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
