import { afterEach, describe, expect, it } from 'vitest';
import { CoordinatedMember, CoordinatorAdmin, type ShardsEvent, StreamProducer } from '@redis-stream-coordinator/core';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const started: CoordinatedMember[] = [];

afterEach(async () => {
  await Promise.all(started.splice(0).map((m) => m.stop().catch(() => undefined)));
});

function aMember(streamPrefix: string, memberId: string, extra: Partial<ConstructorParameters<typeof CoordinatedMember>[1]> = {}) {
  const member = new CoordinatedMember(redis.client(), {
    streamPrefix,
    consumerGroup: 'group',
    memberId,
    shardCount: 4,
    coordinator: { heartbeatIntervalMs: 200 },
    handler: () => undefined,
    ...extra,
  });
  member.on('error', () => undefined);
  started.push(member);
  return member;
}

describe('member events', () => {
  it('assigned and revoked carry the shard lists and the member epoch', async () => {
    const streamPrefix = uniqueName('events');
    const a = aMember(streamPrefix, 'a');
    const assigned: ShardsEvent[] = [];
    const revoked: ShardsEvent[] = [];
    a.on('assigned', (event) => assigned.push(event));
    a.on('revoked', (event) => revoked.push(event));
    await a.start();
    await pollUntil('a to own every shard', async () => a.ownedShards().length === 4);
    expect(assigned).toEqual([{ shards: [0, 1, 2, 3], memberEpoch: 1 }]);

    const b = aMember(streamPrefix, 'b');
    await b.start();
    await pollUntil('b to own two shards', async () => b.ownedShards().length === 2);
    expect(revoked).toEqual([{ shards: [2, 3], memberEpoch: 1 }]);
    expect(a.ownedShards()).toEqual([0, 1]);
    expect(a.currentMemberEpoch()).toBe(2);
  });

  it('fenced: a member whose epoch the coordinator refuses drops its shards and rejoins', async () => {
    const streamPrefix = uniqueName('fenced');
    // A short session: the rejoin below renewed a's lease without a seeing that answer, so a's own
    // rejoin is refused (NO_TIMELY_ANSWER: no accepted answer since that renewal, SPEC 10.2) until
    // that lease runs out; then it joins.
    const a = aMember(streamPrefix, 'a', { sessionTimeoutMs: 3000 });
    const fenced: unknown[] = [];
    a.on('fenced', (event) => fenced.push(event));
    await a.start();
    await pollUntil('a to own every shard', async () => a.ownedShards().length === 4);
    // a rejoin of this instance whose answer it never got: the epoch a holds is no longer current
    // (a rejoin from another instance would be refused: FENCED_INSTANCE_ID, test/member-lifecycle)
    await a.coordinator.heartbeat({
      streamPrefix,
      consumerGroup: 'group',
      memberId: 'a',
      memberEpoch: 0,
      instanceId: a.instanceId,
      sessionTimeoutMs: 3000,
    });
    await pollUntil('a to be told', async () => fenced.length > 0);
    expect(fenced[0]).toMatchObject({ errorCode: 'FENCED_MEMBER_EPOCH', memberEpoch: 1 });
    await pollUntil('a to rejoin and own its shards again', async () => a.ownedShards().length === 4 && a.currentMemberEpoch() > 1);
  });

  it('never buffers more than maxBufferedEntries unprocessed entries', async () => {
    const streamPrefix = uniqueName('backpressure');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 4 });
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(Array.from({ length: 2000 }, (_, i) => ({ key: `k${i}`, payload: i })));
    let handled = 0;
    let maxBuffered = 0;
    const member = aMember(streamPrefix, 'slow', {
      runtimeMaxConcurrency: 2,
      batchSize: 30,
      maxBufferedEntries: 50,
      handler: async () => {
        maxBuffered = Math.max(maxBuffered, member.stats().bufferedEntries);
        handled += 1;
        await new Promise((resolve) => setImmediate(resolve));
      },
    });
    await member.start();
    await pollUntil('2,000 entries handled', async () => handled === 2000, { timeoutMs: 30_000 });
    expect(maxBuffered).toBeGreaterThan(0);
    expect(maxBuffered).toBeLessThanOrEqual(50);
  });
});
