import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, PartialBatchError, StreamProducer, type StreamMessage } from '@redis-stream-coordinator/core';
import { ShardClient } from '../../packages/core/src/redis/shard-client';
import type { KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// docs/runtime.md, Delayed delivery: a delayed entry waits durably in its shard's schedule and
// enters the shard stream once due, moved by whichever member owns the shard, exactly once.

const redis = useRedisServer();
/** The poll interval of these members: a due entry is released within about this much of its time. */
const BLOCK_MS = 300;
const aMember = memberFactory(redis, { blockMs: BLOCK_MS });
const keys = new KeyBuilder();

async function aStream(shardCount = 1, label = 'delayed'): Promise<string> {
  const streamPrefix = uniqueName(label);
  await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount });
  return streamPrefix;
}

async function redisNowMs(): Promise<number> {
  const [seconds, micros] = await redis.client().time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

/** Shard `shardIndex`'s stream and schedule, as stored. */
async function stored(streamPrefix: string, shardIndex = 0) {
  const client = redis.client();
  const stream = await client.xrange(keys.shardStream(streamPrefix, shardIndex), '-', '+');
  return {
    stream: stream.map(([, fields]) => JSON.parse(fields[fields.indexOf('p') + 1]) as KeyedPayload),
    scheduled: await client.zcard(keys.shardSchedule(streamPrefix, shardIndex)),
    scheduledFields: await client.hlen(keys.shardScheduledEntries(streamPrefix, shardIndex)),
  };
}

/** A handler that records when (Redis' clock) it saw each payload. */
function recorder() {
  const seen: { seq: number; key: string | undefined; at: number; deliveryCount: number }[] = [];
  return {
    seen,
    handler: async (message: StreamMessage<KeyedPayload>) => {
      seen.push({ seq: message.payload.seq, key: message.key, at: await redisNowMs(), deliveryCount: message.deliveryCount });
    },
  };
}

describe('delayed delivery: the producer', () => {
  it('a delayed send waits in its shard schedule, not its stream: its result is its schedule id and due time on Redis clock', async () => {
    const streamPrefix = await aStream();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const before = await redisNowMs();
    const result = await producer.send({ key: 'k', payload: { seq: 1 }, delayMs: 60_000 });
    const after = await redisNowMs();
    expect(result.shardIndex).toBe(0);
    expect(result.id).toMatch(/^s\d{16}$/);
    expect(result.dueAt).toBeGreaterThanOrEqual(before + 60_000);
    expect(result.dueAt).toBeLessThanOrEqual(after + 60_000);
    // The entry, the count its key was routed with (a resize moves it to its key's shard when due), and the id counter.
    expect(await stored(streamPrefix)).toEqual({ stream: [], scheduled: 1, scheduledFields: 3 });
  });

  it('in one batch, delayed and immediate entries go where each belongs; deliverAt in the past and delayMs 0 are written at once', async () => {
    const streamPrefix = await aStream();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const results = await producer.sendBatch([
      { key: 'a', payload: { seq: 1 } },
      { key: 'a', payload: { seq: 2 }, delayMs: 60_000 },
      { key: 'a', payload: { seq: 3 }, deliverAt: new Date(Date.now() + 120_000) },
      { key: 'a', payload: { seq: 4 }, deliverAt: Date.now() - 1000 },
      { key: 'a', payload: { seq: 5 }, delayMs: 0 },
    ]);
    expect(results.map((r) => r.dueAt !== undefined)).toEqual([false, true, true, false, false]);
    expect(results[1].id).not.toBe(results[2].id);
    expect((await stored(streamPrefix)).stream.map((p) => p.seq)).toEqual([1, 4, 5]);
    expect((await stored(streamPrefix)).scheduled).toBe(2);
  });

  it("a schedule write that fails (WRONGTYPE) fails that entry and its key's later ones, not written; other keys land", async () => {
    const streamPrefix = await aStream();
    await redis.client().set(keys.shardSchedule(streamPrefix, 0), 'not a sorted set');
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const failed = await producer
      .sendBatch([
        { key: 'a', payload: { seq: 1 }, delayMs: 60_000 },
        { key: 'a', payload: { seq: 2 } },
        { key: 'b', payload: { seq: 3 } },
      ])
      .catch((error: PartialBatchError) => error);
    expect(failed).toBeInstanceOf(PartialBatchError);
    const partial = failed as PartialBatchError;
    expect(partial.failed.map((f) => [f.index, f.maybeWritten])).toEqual([
      [0, false],
      [1, false],
    ]);
    expect(partial.failed[0].error.message).toMatch(/WRONGTYPE/);
    expect(partial.written.map((w) => w.index)).toEqual([2]);
    const stream = await redis.client().xrange(keys.shardStream(streamPrefix, 0), '-', '+');
    expect(stream.map(([, fields]) => fields[fields.indexOf('p') + 1])).toEqual(['{"seq":3}']);
    expect(await redis.client().hlen(keys.shardScheduledEntries(streamPrefix, 0))).toBe(1); // the id counter only: nothing of the entry left
  });

  it('refuses a delay out of range, naming the option and the value, and writes nothing', async () => {
    const streamPrefix = await aStream();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await expect(producer.send({ payload: {}, delayMs: -1 })).rejects.toThrow('delayMs must be an integer from 0 to 31536000000, got -1');
    await expect(producer.send({ payload: {}, delayMs: 31_536_000_001 })).rejects.toThrow('got 31536000001');
    await expect(producer.send({ payload: {}, delayMs: 1.5 })).rejects.toThrow('delayMs must be an integer');
    await expect(producer.send({ payload: {}, deliverAt: new Date(Number.NaN) })).rejects.toThrow('deliverAt must be an integer');
    const tooLate = Date.now() + 366 * 86_400_000;
    await expect(producer.send({ payload: {}, deliverAt: tooLate })).rejects.toThrow(`deliverAt must be at most 365 days ahead`);
    await expect(producer.send({ payload: {}, deliverAt: tooLate })).rejects.toThrow(`got ${tooLate}`);
    await expect(producer.send({ payload: {}, delayMs: 5, deliverAt: Date.now() })).rejects.toThrow('delayMs or deliverAt, not both');
    await expect(producer.sendBatch([{ payload: { seq: 1 } }, { payload: { seq: 2 }, delayMs: -5 }])).rejects.toThrow('got -5');
    expect(await stored(streamPrefix)).toEqual({ stream: [], scheduled: 0, scheduledFields: 0 });
  });
});

describe('delayed delivery: the release', () => {
  it('a delayed entry is handled no earlier than its due time and within the bound, exactly once', async () => {
    const streamPrefix = await aStream();
    const { seen, handler } = recorder();
    const member = aMember({ streamPrefix, handler });
    await member.start();
    await pollUntil('the shard owned', async () => member.ownedShards().length === 1);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const { dueAt } = await producer.send({ key: 'k', payload: { seq: 1 }, delayMs: 1200 });
    await pollUntil('the delayed entry handled', async () => seen.length > 0, { timeoutMs: 15_000 });
    expect(seen[0].at).toBeGreaterThanOrEqual(dueAt!);
    // The bound (docs/runtime.md): within blockMs of its due time, plus a call and a read; the slack
    // is for a loaded machine.
    expect(seen[0].at - dueAt!).toBeLessThan(BLOCK_MS + 1500);
    expect(await stored(streamPrefix)).toEqual({ stream: [{ seq: 1 }], scheduled: 0, scheduledFields: 1 });
    expect(seen).toHaveLength(1);
  });

  it('a delayed entry takes its place in its key order when due: entries of its key sent after it, not delayed, go first', async () => {
    const streamPrefix = await aStream();
    const { seen, handler } = recorder();
    const member = aMember({ streamPrefix, handler });
    await member.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch([
      { key: 'k', payload: { seq: 1 }, delayMs: 600 },
      { key: 'k', payload: { seq: 2 } },
    ]);
    await pollUntil('both handled', async () => seen.length === 2, { timeoutMs: 15_000 });
    expect(seen.map((s) => s.seq)).toEqual([2, 1]);
  });

  it('entries of one key due at the same time are released in send order, past nine (schedule ids sort as numbers)', async () => {
    const streamPrefix = await aStream();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    // One batch, one delay: all twelve get the same due time, so only the schedule ids order them.
    const results = await producer.sendBatch(Array.from({ length: 12 }, (_, i) => ({ key: 'k', payload: { seq: i + 1 }, delayMs: 500 })));
    expect(new Set(results.map((r) => r.dueAt)).size).toBe(1);
    const { seen, handler } = recorder();
    const member = aMember({ streamPrefix, handler });
    await member.start();
    await pollUntil('all twelve handled', async () => seen.length === 12, { timeoutMs: 15_000 });
    expect(seen.map((s) => s.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
  });

  it('survives its member killed and restarted before it is due: released once, by the restarted owner', async () => {
    const streamPrefix = await aStream();
    const { seen, handler } = recorder();
    const member = aMember({ streamPrefix, handler, sessionTimeoutMs: 1000 });
    await member.start();
    await pollUntil('the shard owned', async () => member.ownedShards().length === 1);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const { dueAt } = await producer.send({ key: 'k', payload: { seq: 7 }, delayMs: 1500 });
    await member.abort(); // a crash: no leave, its lease runs out
    expect(await stored(streamPrefix)).toMatchObject({ stream: [], scheduled: 1 });
    // describeGroup shows it (SPEC 9.6), outside the backlog: it is not due yet.
    expect((await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group')).shards[0]).toMatchObject({
      scheduled: 1,
      deferred: 0,
      parked: 0,
      backlog: 0,
    });
    await member.start();
    await pollUntil('the delayed entry handled after the restart', async () => seen.length > 0, { timeoutMs: 20_000 });
    expect(seen[0].at).toBeGreaterThanOrEqual(dueAt!);
    expect(await stored(streamPrefix)).toEqual({ stream: [{ seq: 7 }], scheduled: 0, scheduledFields: 1 });
    expect(seen.map((s) => s.seq)).toEqual([7]);
  });

  it('with no owner when it is due, it waits durably and is released once a member owns the shard', async () => {
    const streamPrefix = await aStream();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ key: 'k', payload: { seq: 1 }, delayMs: 1 });
    const { seen, handler } = recorder();
    const dueBefore = await redisNowMs();
    expect(await stored(streamPrefix)).toMatchObject({ stream: [], scheduled: 1 });
    await aMember({ streamPrefix, handler }).start();
    await pollUntil('handled once a member owns the shard', async () => seen.length > 0, { timeoutMs: 15_000 });
    expect(seen[0].at).toBeGreaterThanOrEqual(dueBefore);
  });

  it('every group sees a released entry once, whichever group owner released it', async () => {
    const streamPrefix = await aStream(2);
    const first = recorder();
    const second = recorder();
    await aMember({ streamPrefix, consumerGroup: 'first', handler: first.handler }).start();
    await aMember({ streamPrefix, consumerGroup: 'second', handler: second.handler }).start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(Array.from({ length: 20 }, (_, seq) => ({ key: `k${seq}`, payload: { seq }, delayMs: 400 })));
    await pollUntil('both groups handled all', async () => first.seen.length === 20 && second.seen.length === 20, {
      timeoutMs: 15_000,
    });
    for (const group of [first, second]) expect(group.seen.map((s) => s.seq).sort((a, b) => a - b)).toEqual([...Array(20).keys()]);
    const [zero, one] = [await stored(streamPrefix, 0), await stored(streamPrefix, 1)];
    expect(zero.stream.length + one.stream.length).toBe(20);
    expect(zero.scheduled + one.scheduled).toBe(0);
  });

  it('a member that lost the shard releases nothing: a stale fencing token is refused and the schedule is kept', async () => {
    const streamPrefix = await aStream();
    const member = aMember({ streamPrefix, handler: () => undefined });
    await member.start();
    await pollUntil('the shard owned', async () => member.ownedShards().length === 1);
    member.pause(); // its loop releases nothing while paused: the zombie's call is the only one
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ key: 'k', payload: { seq: 1 }, delayMs: 1 });
    const schedule = keys.shardSchedule(streamPrefix, 0);
    await pollUntil('due', async () => (await redis.client().zcount(schedule, '-inf', await redisNowMs())) === 1);
    const zombie = new ShardClient(redis.client(), keys, streamPrefix, 'group', 'zombie-member');
    expect(await zombie.releaseDue(0, 1_000_000, 10)).toBeNull();
    expect(await stored(streamPrefix)).toMatchObject({ stream: [], scheduled: 1 });
  });

  it('a release that fails for OOM releases nothing it does not remove: once memory is back, each entry enters the stream once', async () => {
    const streamPrefix = await aStream();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(Array.from({ length: 5 }, (_, i) => ({ key: 'k', payload: { seq: i + 1 }, delayMs: 1 })));
    const schedule = keys.shardSchedule(streamPrefix, 0);
    await pollUntil('due', async () => (await redis.client().zcount(schedule, '-inf', await redisNowMs())) === 5);
    await redis.client().set(keys.shardFence(streamPrefix, 0, 'group'), '0:1:owner');
    const owner = new ShardClient(redis.client(), keys, streamPrefix, 'group', 'owner');
    const admin = redis.client();
    try {
      await admin.config('SET', 'maxmemory', '1');
      await expect(owner.releaseDue(0, 1, 256)).rejects.toThrow(/OOM/);
    } finally {
      await admin.config('SET', 'maxmemory', '0');
    }
    const stream = keys.shardStream(streamPrefix, 0);
    expect((await redis.client().xlen(stream)) + (await redis.client().zcard(schedule))).toBe(5);
    await owner.releaseDue(0, 1, 256);
    expect(await stored(streamPrefix)).toEqual({
      stream: [1, 2, 3, 4, 5].map((seq) => ({ seq })),
      scheduled: 0,
      scheduledFields: 1,
    });
  });

  it("a shrink's drain waits for a removed shard's schedule: the delayed entry is released and handled before the shard leaves the readable set", async () => {
    const streamPrefix = await aStream(2, 'delayed-shrink');
    const { seen, handler } = recorder();
    await aMember({ streamPrefix, handler, cutoverCheckIntervalMs: 50, sessionTimeoutMs: 3000 }).start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    // Due well after the shrink's cutover would end without its schedule (about 3 s after the
    // switch with these settings): were the drain to pass it, the shard would leave the readable set
    // with the entry in its schedule and nobody would ever release it.
    const { dueAt } = await producer.send({ payload: { seq: 1 }, shardIndex: 1, delayMs: 6000 });
    const admin = new CoordinatorAdmin(redis.client());
    await admin.resizeShards(streamPrefix, 1, { graceMs: 50, switchDelayMs: 50 });
    const readabilityOf1 = async () =>
      (await admin.describeGroup(streamPrefix, 'group')).shards.find((s) => s.shardIndex === 1)?.readability;
    // Its stream is empty and processed long before the entry is due: the schedule alone keeps it draining.
    await pollUntil('shard 1 draining with its stream processed', async () => {
      const backlog = (await admin.describeGroup(streamPrefix, 'group')).shards.find((s) => s.shardIndex === 1)?.backlog;
      return backlog === 0 && (await readabilityOf1()) === 'draining';
    });
    expect(await redisNowMs()).toBeLessThan(dueAt!);
    expect(await readabilityOf1()).toBe('draining');
    await pollUntil('the delayed entry handled', async () => seen.length === 1, { timeoutMs: 20_000 });
    expect(seen[0].at).toBeGreaterThanOrEqual(dueAt!);
    await pollUntil('shard 1 drained once its schedule is empty', async () => (await readabilityOf1()) === 'drained', {
      timeoutMs: 20_000,
    });
  });
});
