import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { type CoordinatedMember, CoordinatorAdmin, type StreamMessage, StreamProducer } from '@redis-stream-coordinator/core';
import { HandlerRecorder, type KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// One buffer budget per client (docs/runtime.md, One buffer budget per client): the members made
// from one client buffer at most maxBufferedEntriesPerClient entries together, each may always hold
// its share, and every way an entry leaves a queue gives its room back.
const redis = useRedisServer();
const aMember = memberFactory(redis, { sweepIntervalMs: 500 });

async function aStream(shardCount: number): Promise<string> {
  const streamPrefix = uniqueName('budget');
  await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount });
  return streamPrefix;
}

/** Writes `count` entries spread over the shards by key; returns the shard of each. */
async function write(streamPrefix: string, count: number): Promise<number[]> {
  const producer = new StreamProducer(redis.client(), { streamPrefix });
  const sent = await producer.sendBatch(Array.from({ length: count }, (_, i) => ({ key: `k${i}`, payload: { seq: i } })));
  return sent.map((s) => s.shardIndex);
}

/** Waits until the members own every shard between them, each at least one: the budget's members are settled. */
async function settledAssignment(members: CoordinatedMember<KeyedPayload>[], shardCount: number): Promise<void> {
  await pollUntil(`${members.length} members own the ${shardCount} shards between them`, async () => {
    const owned = members.map((m) => m.stats().ownedShards.length);
    return owned.every((n) => n > 0) && owned.reduce((a, b) => a + b, 0) === shardCount && members.every((m) => m.stats().joined);
  });
}

/** Entries pending on the shards (read by their owner, not acknowledged yet). */
async function pendingOn(streamPrefix: string, shards: number[]): Promise<number> {
  const { shards: described } = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
  return described.filter((s) => shards.includes(s.shardIndex)).reduce((sum, s) => sum + s.pending, 0);
}

/** A handler that waits until `open` (or until its call is aborted: then it fails, and the entry is someone else's). */
function gated(): { handler: (message: StreamMessage<KeyedPayload>) => Promise<void>; open: () => void } {
  let open: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => (open = resolve));
  return {
    open: () => open(),
    handler: (message) =>
      new Promise<void>((resolve, reject) => {
        void gate.then(resolve);
        message.signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true });
      }),
  };
}

describe('one buffer budget per client', () => {
  it('the members of one client never buffer more than maxBufferedEntriesPerClient together, and handle every entry once', async () => {
    const streamPrefix = await aStream(16);
    const client = redis.client();
    const recorder = new HandlerRecorder();
    const members: CoordinatedMember<KeyedPayload>[] = [];
    let sampled = 0;
    const sample = () => {
      sampled = Math.max(
        sampled,
        members.reduce((sum, m) => sum + m.stats().bufferedEntries, 0),
      );
    };
    for (const id of ['a', 'b', 'c', 'd']) {
      const member = aMember(
        {
          streamPrefix,
          memberId: id,
          maxBufferedEntries: 100,
          maxBufferedEntriesPerClient: 40,
          batchSize: 20,
          runtimeMaxConcurrency: 2,
          handler: recorder.handler(id, async () => {
            sample();
            await new Promise((resolve) => setImmediate(resolve));
          }),
        },
        client,
      );
      members.push(member);
    }
    await Promise.all(members.map((m) => m.start()));
    await settledAssignment(members, 16);
    const total = (await write(streamPrefix, 2000)).length;
    await pollUntil('2,000 entries handled', async () => recorder.distinctEntries() === total, { timeoutMs: 60_000 });
    const budget = members[0].stats().clientBuffer;
    expect(budget).toMatchObject({ cap: 40, members: 4, share: 10 });
    expect(sampled).toBeGreaterThan(0);
    expect(sampled).toBeLessThanOrEqual(40);
    expect(budget.peakEntries).toBeGreaterThan(0);
    expect(budget.peakEntries).toBeLessThanOrEqual(40);
    expect(recorder.duplicates()).toEqual([]);
  });

  it('a member whose handler hangs holds no more than the budget less the others’ shares: the other reads and handles its entries', async () => {
    const streamPrefix = await aStream(8);
    const client = redis.client();
    const stuck = gated();
    const recorder = new HandlerRecorder();
    const options = { streamPrefix, maxBufferedEntries: 100, maxBufferedEntriesPerClient: 40, batchSize: 10, shutdownTimeoutMs: 1000 };
    const a = aMember({ ...options, memberId: 'a', handler: recorder.handler('a', stuck.handler) }, client);
    const b = aMember({ ...options, memberId: 'b', handler: recorder.handler('b') }, client);
    await Promise.all([a.start(), b.start()]);
    await settledAssignment([a, b], 8);
    const written = await write(streamPrefix, 400);
    const total = written.length;
    const bShards = b.stats().ownedShards;
    const onB = written.filter((shard) => bShards.includes(shard)).length;
    let mostOnA = 0;
    await pollUntil(
      "b handled every entry of its shards while a's handler hangs",
      async () => {
        mostOnA = Math.max(mostOnA, a.stats().bufferedEntries);
        return recorder.runs.filter((r) => r.memberId === 'b').length === onB;
      },
      { timeoutMs: 30_000, intervalMs: 5 },
    );
    // a buffered, but never more than the budget less b's share (20).
    expect(mostOnA).toBeGreaterThan(0);
    expect(mostOnA).toBeLessThanOrEqual(20);
    expect(a.stats().clientBuffer.peakEntries).toBeLessThanOrEqual(40);
    stuck.open();
    await pollUntil('every entry handled', async () => recorder.distinctEntries() === total, { timeoutMs: 30_000 });
    expect(recorder.duplicates()).toEqual([]);
  });

  it("a revoked shard's buffered entries give their room back; its next owner handles them", async () => {
    const streamPrefix = await aStream(4);
    const stuck = gated();
    const recorder = new HandlerRecorder();
    const a = aMember({
      streamPrefix,
      memberId: 'a',
      maxBufferedEntries: 100,
      maxBufferedEntriesPerClient: 20,
      batchSize: 10,
      revocationTimeoutMs: 500,
      shutdownTimeoutMs: 1000,
      handler: recorder.handler('a', stuck.handler),
    });
    await a.start();
    await settledAssignment([a], 4);
    const written = await write(streamPrefix, 400);
    // a fills its budget of 20, but for at most one entry: a read asks each shard for 2 entries at
    // least (half of a shard's share of 5), so with 5 entries of room it reads two shards, 2 each, and
    // the last entry of room waits for a handler to free more. Waiting for exactly 20 timed out in CI
    // runs whenever the reads happened to end there.
    await pollUntil('a buffers its whole budget, less one entry at most', async () => a.stats().clientBuffer.entries >= 19, {
      state: () => {
        const { clientBuffer, bufferedEntries, activeHandlers, ownedShards, problems } = a.stats();
        return { clientBuffer, bufferedEntries, activeHandlers, ownedShards, problems };
      },
    });
    // Another member, on a client (and budget) of its own, takes two shards: their queued entries leave a's buffer.
    const b = aMember({ streamPrefix, memberId: 'b', handler: recorder.handler('b') });
    await b.start();
    await pollUntil('a and b own two shards each', async () => a.stats().ownedShards.length === 2 && b.stats().ownedShards.length === 2, {
      timeoutMs: 15_000,
    });
    const kept = a.stats().ownedShards;
    const moved = b.stats().ownedShards;
    // What a's budget counts is what it holds on the shards it kept (pending there: queued, or its
    // stuck call): the revoked shards' entries gave their room back.
    await pollUntil('a counts only the entries of the shards it kept', async () => {
      const { entries } = a.stats().clientBuffer;
      const pending = await pendingOn(streamPrefix, kept);
      return entries <= pending && pending <= entries + a.stats().activeHandlers;
    });
    await pollUntil('b handled every entry of the shards it took', async () => {
      return recorder.runs.filter((r) => r.memberId === 'b').length === written.filter((shard) => moved.includes(shard)).length;
    });
    expect(a.stats().clientBuffer).toMatchObject({ entries: a.stats().bufferedEntries, cap: 20, members: 1 });
    stuck.open();
    await pollUntil('every entry handled', async () => recorder.distinctEntries() === written.length, { timeoutMs: 30_000 });
    expect(recorder.duplicates()).toEqual([]);
  });

  it('stopping a member gives its room back to the others of its client', async () => {
    const streamPrefix = await aStream(4);
    const client = redis.client();
    const stuck = gated();
    const options = { streamPrefix, maxBufferedEntries: 100, maxBufferedEntriesPerClient: 20, batchSize: 10, shutdownTimeoutMs: 200 };
    const a = aMember({ ...options, memberId: 'a', handler: stuck.handler }, client);
    const b = aMember({ ...options, memberId: 'b', handler: stuck.handler }, client);
    await Promise.all([a.start(), b.start()]);
    await settledAssignment([a, b], 4);
    await write(streamPrefix, 400);
    let mostOnB = 0;
    await pollUntil('a and b buffer', async () => {
      mostOnB = Math.max(mostOnB, b.stats().bufferedEntries);
      return a.stats().bufferedEntries > 0 && b.stats().bufferedEntries > 0;
    });
    await a.stop();
    // Sharing, b held its share (10) at most; alone on the budget now, it buffers past it.
    expect(mostOnB).toBeLessThanOrEqual(10);
    expect(b.stats().clientBuffer).toMatchObject({ members: 1, share: 20, entries: b.stats().bufferedEntries });
    await pollUntil('b buffers past its old share', async () => b.stats().bufferedEntries > 10, { timeoutMs: 15_000 });
    expect(b.stats().clientBuffer.entries).toBeLessThanOrEqual(20);
    stuck.open();
  });

  it('at its maximum (100,000) and its minimum (1): the members share it and handle every entry', async () => {
    for (const [cap, most] of [
      [100_000, 100_000],
      [1, 2],
    ]) {
      const streamPrefix = await aStream(4);
      const client = redis.client();
      const recorder = new HandlerRecorder();
      const members: CoordinatedMember<KeyedPayload>[] = [];
      let sampled = 0;
      for (const id of ['a', 'b']) {
        const member = aMember(
          {
            streamPrefix,
            memberId: id,
            maxBufferedEntries: 100_000,
            maxBufferedEntriesPerClient: cap,
            handler: recorder.handler(id, () => {
              sampled = Math.max(
                sampled,
                members.reduce((sum, m) => sum + m.stats().bufferedEntries, 0),
              );
            }),
          },
          client,
        );
        members.push(member);
      }
      await Promise.all(members.map((m) => m.start()));
      await settledAssignment(members, 4);
      const total = (await write(streamPrefix, 300)).length;
      await pollUntil(`300 entries handled (budget ${cap})`, async () => recorder.distinctEntries() === total, { timeoutMs: 30_000 });
      // With more members than the budget, each still holds one entry (it never starves).
      expect(members[0].stats().clientBuffer).toMatchObject({ cap, members: 2, share: Math.max(1, cap / 2) });
      expect(members[0].stats().clientBuffer.peakEntries).toBeLessThanOrEqual(most);
      expect(sampled).toBeLessThanOrEqual(most);
      expect(recorder.duplicates()).toEqual([]);
      await Promise.all(members.map((m) => m.stop()));
    }
  });

  it('bad values are refused naming the option and the value; the default is 8,000 or maxBufferedEntries if larger', async () => {
    const streamPrefix = uniqueName('budget-options');
    const make = (options: object, client?: Redis) => aMember({ streamPrefix, handler: () => undefined, ...options }, client);
    for (const bad of [0, 100_001, 1.5, Number.NaN, '10' as unknown as number]) {
      expect(() => make({ maxBufferedEntriesPerClient: bad })).toThrow(/maxBufferedEntriesPerClient.*from 1 to 100000/);
      expect(() => make({ maxBufferedEntriesPerClient: bad })).toThrow(`got ${JSON.stringify(bad)}`);
    }
    expect(() => make({ batch: { maxSize: 50 }, maxBufferedEntriesPerClient: 40 })).toThrow(
      'batch.maxSize (50) must not exceed maxBufferedEntriesPerClient (40)',
    );
    const lone = make({});
    expect(lone.stats().clientBuffer).toEqual({ entries: 0, peakEntries: 0, cap: 0, members: 0, share: 0 });
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 1 });
    await lone.start();
    expect(lone.stats().clientBuffer).toMatchObject({ cap: 8000, members: 1, share: 8000 });
    const large = make({ maxBufferedEntries: 20_000 });
    await large.start();
    expect(large.stats().clientBuffer).toMatchObject({ cap: 20_000, members: 1 });
  });
});

describe("a process's members joining a new group at once", () => {
  it('create its Redis group on each shard stream once between them, not once per member', async () => {
    const streamPrefix = await aStream(1024);
    const client = redis.client();
    const stats = redis.client();
    await stats.config('RESETSTAT');
    const members = Array.from({ length: 16 }, (_, i) => aMember({ streamPrefix, memberId: `m${i}`, handler: () => undefined }, client));
    await Promise.all(members.map((m) => m.start()));
    await settledAssignment(members, 1024);
    const line = (await stats.info('commandstats')).split('\n').find((l) => l.startsWith('cmdstat_xgroup|create:')) ?? '';
    const creates = Number(/calls=(\d+)/.exec(line)?.[1] ?? 0);
    // One run for the 16 (1,024 creates), and the claims' own (claimShard-2.lua, one per shard):
    // each member's run was 16 × 1,024 commands in flight at once.
    expect(creates).toBeGreaterThanOrEqual(1024);
    expect(creates).toBeLessThanOrEqual(3 * 1024);
  });
});
