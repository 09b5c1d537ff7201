import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import { HandlerRecorder, keyedMessages, type KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
/** Members on connections of their own (so a test can cut one), stopped after each test. */
const aMember = memberFactory(redis);

async function produce(streamPrefix: string, messages: { key: string; payload: KeyedPayload }[]) {
  const producer = new StreamProducer(redis.client(), { streamPrefix });
  for (let i = 0; i < messages.length; i += 1000) await producer.sendBatch(messages.slice(i, i + 1000));
}

async function stableWithAllShardsOwned(streamPrefix: string, shardCount: number) {
  const admin = new CoordinatorAdmin(redis.client());
  return pollUntil('a STABLE group with every shard owned', async () => {
    const description = await admin.describeGroup(streamPrefix, 'group');
    return (
      description.group.state === 'STABLE' && description.shards.filter((s) => s.state === 'OWNED').length === shardCount && description
    );
  });
}

describe('CoordinatedMember', () => {
  it('3 members, 12 shards, 30,000 keyed entries: each handled once, in key order, one handler per shard at a time, balanced', async () => {
    const streamPrefix = uniqueName('orders');
    const recorder = new HandlerRecorder();
    const members = ['a', 'b', 'c'].map((id) =>
      aMember({ streamPrefix, memberId: id, shardCount: 12, runtimeMaxConcurrency: 4, handler: recorder.handler(id) }),
    );
    await Promise.all(members.map((m) => m.start()));
    const description = await stableWithAllShardsOwned(streamPrefix, 12);
    expect(description.members.map((m) => m.currentAssignment.length)).toEqual([4, 4, 4]);

    await produce(streamPrefix, keyedMessages(300, 100));
    await pollUntil('30,000 entries handled', async () => recorder.distinctEntries() === 30_000, { timeoutMs: 60_000 });

    expect(recorder.runs).toHaveLength(30_000);
    expect(recorder.duplicates()).toEqual([]);
    expect(recorder.orderViolations()).toEqual([]);
    expect(recorder.overlaps()).toEqual([]);
    const after = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
    expect(after.shards.map((s) => s.pending + s.lag)).toEqual(Array(12).fill(0));
  }, 90_000);

  it('under load: a member joins, one stops gracefully, one dies; nothing is lost, key order holds, duplicates only from the death', async () => {
    const streamPrefix = uniqueName('load');
    const recorder = new HandlerRecorder();
    const work = () => new Promise<void>((resolve) => setTimeout(resolve, 1));
    const fast = { sessionTimeoutMs: 1000, runtimeMaxConcurrency: 4, shardCount: 12 };
    const doomedConnection = redis.client();
    const doomed = aMember({ streamPrefix, memberId: 'doomed', ...fast, handler: recorder.handler('doomed', work) }, doomedConnection);
    const leaver = aMember({ streamPrefix, memberId: 'leaver', ...fast, handler: recorder.handler('leaver', work) });
    const joiner = aMember({ streamPrefix, memberId: 'joiner', ...fast, handler: recorder.handler('joiner', work) });
    await Promise.all([doomed.start(), leaver.start()]);

    const producer = new StreamProducer(redis.client(), { streamPrefix });
    let produced = 0;
    let deathAt = Number.POSITIVE_INFINITY;
    for (let round = 1; round <= 200; round++) {
      await producer.sendBatch(Array.from({ length: 50 }, (_, k) => ({ key: `key-${k}`, payload: { seq: round } })));
      produced += 50;
      if (round === 50) await joiner.start();
      if (round === 100) await leaver.stop();
      if (round === 150) {
        deathAt = performance.now();
        doomed.abort();
        doomedConnection.disconnect();
      }
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    await pollUntil('every entry handled', async () => recorder.distinctEntries() === produced, { timeoutMs: 60_000 });

    expect(recorder.orderViolations()).toEqual([]);
    const duplicates = recorder.duplicates();
    for (const duplicate of duplicates) {
      const first = recorder.runs.find((r) => r.shardIndex === duplicate.shardIndex && r.id === duplicate.id)!;
      expect(first.memberId).toBe('doomed');
      expect(first.start).toBeLessThan(deathAt);
    }
    expect(duplicates.length).toBeLessThanOrEqual(50);
    expect(recorder.runs.filter((r) => r.memberId === 'joiner').length).toBeGreaterThan(0);
    const description = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
    expect(Object.fromEntries(description.members.map((m) => [m.memberId, m.state]))).toEqual({
      doomed: 'EXPIRED',
      joiner: 'ACTIVE',
      leaver: 'LEFT',
    });
    // the consumers of the members that are gone were cleaned up once their entries were taken over
    const consumers = await Promise.all(
      Array.from({ length: 12 }, async (_, shard) => {
        const list = (await redis.client().xinfo('CONSUMERS', new KeyBuilder().shardStream(streamPrefix, shard), 'group')) as string[][];
        return list.map((c) => c[1]);
      }),
    );
    expect(new Set(consumers.flat())).toEqual(new Set(['joiner']));
  }, 90_000);

  it('wakes members up: with a 60 s heartbeat interval a join still rebalances at once', async () => {
    // (the interval a member is told is at most a third of its session timeout, hence 600 s)
    const streamPrefix = uniqueName('wake');
    const slow = { heartbeatIntervalMs: 60_000 };
    const members = ['a', 'b'].map((id) =>
      aMember({ streamPrefix, memberId: id, shardCount: 6, sessionTimeoutMs: 600_000, coordinator: slow, handler: () => undefined }),
    );
    for (const m of members) await m.start();
    await stableWithAllShardsOwned(streamPrefix, 6);
    const late = aMember({ streamPrefix, memberId: 'c', sessionTimeoutMs: 600_000, coordinator: slow, handler: () => undefined });
    await late.start();
    // Without the wake-up, a and b would hear of c only at their next heartbeat, a minute away.
    const description = await stableWithAllShardsOwned(streamPrefix, 6);
    expect(description.members.map((m) => m.currentAssignment.length)).toEqual([2, 2, 2]);
    expect(late.ownedShards()).toHaveLength(2);
  });

  it('stop() starts no handler once stopping: the in-flight ones finish and are acknowledged, the rest stay pending, nothing runs twice', async () => {
    const streamPrefix = uniqueName('stop');
    let stopping = false;
    const startedWhileStopping: number[] = [];
    const recorder = new HandlerRecorder();
    const slowly = recorder.handler('first', async (message) => {
      if (stopping) startedWhileStopping.push(message.payload.seq);
      await new Promise((resolve) => setTimeout(resolve, 20));
    });
    const first = aMember({ streamPrefix, memberId: 'first', shardCount: 2, runtimeMaxConcurrency: 2, handler: slowly });
    await first.start();
    await produce(streamPrefix, keyedMessages(4, 25));
    await pollUntil('handlers running', async () => first.stats().activeHandlers > 0);
    stopping = true;
    await first.stop();
    expect(startedWhileStopping).toEqual([]);

    const heir = aMember({ streamPrefix, memberId: 'heir', handler: recorder.handler('heir') });
    await heir.start();
    await pollUntil('all 100 handled', async () => recorder.distinctEntries() === 100);
    expect(recorder.duplicates()).toEqual([]);
    expect(recorder.orderViolations()).toEqual([]);
  });
});
