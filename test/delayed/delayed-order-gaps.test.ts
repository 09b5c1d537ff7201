import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, StreamProducer, type StreamMessage } from '@redis-stream-coordinator/core';
import { shardForKey } from '../../packages/core/src/producer/key-hash';
import { hookCommands, isScriptOn } from '../support/command-hooks';
import type { KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// Known gaps in a key's order for delayed entries across resizes (docs/runtime.md, Delayed
// delivery, "Known gaps"): each test reproduces one with a slow owner on one side and fails today
// (an attack review of afcd154, which holds a surviving shard's schedule while its group's ordered
// shrink cutover is pending). Skipped so that npm test stays green; take the skip off with the fix.

const redis = useRedisServer();
const aMember = memberFactory(redis, { blockMs: 300 });
const keys = new KeyBuilder();

function keysThat(from: number, to: number): string {
  for (let i = 0; ; i++) if (shardForKey(`key-${i}`, from) !== shardForKey(`key-${i}`, to)) return `key-${i}`;
}

async function aStream(shardCount: number, label: string): Promise<string> {
  const streamPrefix = uniqueName(label);
  await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount });
  return streamPrefix;
}

function recorder() {
  const seen: { key: string | undefined; seq: number; shardIndex: number }[] = [];
  return {
    seen,
    handler: (message: StreamMessage<KeyedPayload>) => {
      seen.push({ key: message.key, seq: message.payload.seq, shardIndex: message.shardIndex });
    },
    seqsOf: (key: string) => seen.filter((s) => s.key === key).map((s) => s.seq),
  };
}

const redisNow = async () => {
  const [seconds, micros] = await redis.client().time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
};

async function streamSeqs(streamPrefix: string, shardIndex: number): Promise<number[]> {
  const entries = await redis.client().xrange(keys.shardStream(streamPrefix, shardIndex), '-', '+');
  return entries.map(([, fields]) => (JSON.parse(fields[fields.indexOf('p') + 1]) as KeyedPayload).seq);
}

describe.skip('known gaps in delayed order across resizes (open)', () => {
  it('a group created after the switch (replayed step, no schedule hold) releases the surviving shard ahead of a late move: the live group handles the key out of order', async () => {
    const streamPrefix = await aStream(2, 'attack-replay-hold');
    const key = keysThat(2, 1);
    const removedSchedule = keys.shardSchedule(streamPrefix, 1);
    let removedReleasesFrom = Number.POSITIVE_INFINITY;
    // Both groups' owners of the removed shard are late (their release calls on it fail), as in the
    // commit's own test.
    const late = (name: string, args: string[]) =>
      isScriptOn(name, args, removedSchedule) && Date.now() < removedReleasesFrom ? new Error('connection lost') : ('send' as const);
    const connectionB = redis.client();
    hookCommands(connectionB, late);
    const recordedB = recorder();
    const memberB = aMember({ streamPrefix, handler: recordedB.handler, cutoverCheckIntervalMs: 50, sessionTimeoutMs: 3000 }, connectionB);
    await memberB.start();
    await pollUntil('both shards owned', async () => memberB.ownedShards().length === 2);
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 100 });
    const first = await producer.send({ key, payload: { seq: 1 }, delayMs: 8000 });
    expect(first.shardIndex).toBe(1);
    const resized = await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 1, {
      ordered: true,
      switchDelayMs: 300,
      graceMs: 50,
    });
    await pollUntil('switched', async () => (await redisNow()) > Date.parse(resized.switchAt!), { timeoutMs: 10_000 });

    // A new group, created now: its cutover is a replayed step (scheduleHeldShards: nothing held).
    const connectionC = redis.client();
    hookCommands(connectionC, late);
    const recordedC = recorder();
    const memberC = aMember(
      { streamPrefix, consumerGroup: 'late-group', handler: recordedC.handler, cutoverCheckIntervalMs: 50, sessionTimeoutMs: 3000 },
      connectionC,
    );
    await memberC.start();
    await pollUntil('the new group owns both shards', async () => memberC.ownedShards().length === 2, { timeoutMs: 10_000 });

    expect(await redisNow()).toBeLessThan(first.dueAt!);
    const second = await producer.send({ key, payload: { seq: 2 }, delayMs: first.dueAt! - (await redisNow()) + 300 });
    expect(second.shardIndex).toBe(0);
    expect(second.dueAt!).toBeGreaterThan(first.dueAt!);
    removedReleasesFrom = second.dueAt! + 1000;
    await pollUntil('both handled by the live group', async () => recordedB.seen.length === 2, { timeoutMs: 25_000 });
    const order = { stream0: await streamSeqs(streamPrefix, 0), liveGroup: recordedB.seqsOf(key), newGroup: recordedC.seqsOf(key) };
    expect(order).toEqual({ stream0: [1, 2], liveGroup: [1, 2], newGroup: [1, 2] });
  });

  it("ordered growth, after its cutover: a key's delayed entry left on its old shard and moved late goes after the key's later delayed entry on the new shard", async () => {
    const streamPrefix = await aStream(2, 'attack-growth-late-move');
    const key = keysThat(2, 4);
    const oldShard = shardForKey(key, 2);
    const newShard = shardForKey(key, 4);
    const oldSchedule = keys.shardSchedule(streamPrefix, oldShard);
    let oldReleasesFrom = Number.POSITIVE_INFINITY;
    const connection = redis.client();
    hookCommands(connection, (name, args) =>
      isScriptOn(name, args, oldSchedule) && Date.now() < oldReleasesFrom ? new Error('connection lost') : 'send',
    );
    const recorded = recorder();
    const member = aMember({ streamPrefix, handler: recorded.handler, cutoverCheckIntervalMs: 50, sessionTimeoutMs: 3000 }, connection);
    await member.start();
    await pollUntil('both shards owned', async () => member.ownedShards().length === 2);
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 100 });
    const first = await producer.send({ key, payload: { seq: 1 }, delayMs: 6000 });
    expect(first.shardIndex).toBe(oldShard);
    await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 4, { ordered: true, graceMs: 200 });
    await pollUntil('cutover completed, all four shards owned', async () => member.ownedShards().length === 4, { timeoutMs: 10_000 });
    expect(await redisNow()).toBeLessThan(first.dueAt!);
    const second = await producer.send({ key, payload: { seq: 2 }, delayMs: first.dueAt! - (await redisNow()) + 300 });
    expect(second.shardIndex).toBe(newShard);
    oldReleasesFrom = second.dueAt! + 1000;
    await pollUntil('both handled', async () => recorded.seen.length === 2, { timeoutMs: 20_000 });
    expect({ stream: await streamSeqs(streamPrefix, newShard), handled: recorded.seqsOf(key) }).toEqual({
      stream: [1, 2],
      handled: [1, 2],
    });
  });
  it("ordered shrink: a removed shard's keyed entry moved (not due) to the surviving shard's schedule keeps its place among its key's entries of the same due time", async () => {
    const streamPrefix = await aStream(2, 'attack-same-due');
    const key = keysThat(2, 1);
    const removedSchedule = keys.shardSchedule(streamPrefix, 1);
    let movesFrom = Number.POSITIVE_INFINITY;
    const connection = redis.client();
    hookCommands(connection, (name, args) =>
      isScriptOn(name, args, removedSchedule) && Date.now() < movesFrom ? new Error('connection lost') : 'send',
    );
    const recorded = recorder();
    const member = aMember({ streamPrefix, handler: recorded.handler, cutoverCheckIntervalMs: 50, sessionTimeoutMs: 3000 }, connection);
    await member.start();
    await pollUntil('both shards owned', async () => member.ownedShards().length === 2);
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 100 });
    const deliverAt = (await redisNow()) + 9000;
    const first = await producer.send({ key, payload: { seq: 1 }, deliverAt });
    expect(first.shardIndex).toBe(1);
    const resized = await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 1, {
      ordered: true,
      switchDelayMs: 300,
      graceMs: 50,
    });
    await pollUntil('switched', async () => (await redisNow()) > Date.parse(resized.switchAt!), { timeoutMs: 10_000 });
    // Sent after the switch, for the same delivery time: after the first in send order.
    const second = await producer.send({ key, payload: { seq: 2 }, deliverAt });
    expect(second.shardIndex).toBe(0);
    expect(second.dueAt).toBe(first.dueAt);
    movesFrom = 0; // the removed shard's owner gets to its schedule now (moved before it is due)
    const schedule0 = keys.shardSchedule(streamPrefix, 0);
    await pollUntil('moved', async () => (await redis.client().zcard(schedule0)) === 2, { timeoutMs: 10_000 });
    expect(await redisNow()).toBeLessThan(deliverAt);
    const waiting = await redis.client().zrange(schedule0, '0', '-1', 'WITHSCORES');
    await pollUntil('both handled', async () => recorded.seen.length === 2, { timeoutMs: 20_000 });
    expect({ handled: recorded.seqsOf(key), second: second.id, waiting }).toEqual({ handled: [1, 2], second: second.id, waiting });
  });
});
