import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import {
  BatchError,
  CoordinatedMember,
  CoordinatorAdmin,
  type DeadLetterEvent,
  type StreamMessage,
  StreamProducer,
} from '@redis-stream-coordinator/core';
import type { KeyedPayload } from '../support/handler-recorder';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';
import { afterEach } from 'vitest';

const redis = useRedisServer();
const started: CoordinatedMember<KeyedPayload>[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((m) => m.stop().catch(() => undefined)));
});

/** A one-shard batch member of group "group"; `calls` gets the seqs of each call. */
async function aBatchMember(
  streamPrefix: string,
  options: {
    maxSize: number;
    maxWaitMs?: number;
    maxAttempts?: number;
    maxBufferedEntries?: number;
    shardCount?: number;
    memberId?: string;
  },
  work: (messages: StreamMessage<KeyedPayload>[], call: number) => unknown = () => undefined,
  client: Redis = redis.client(),
) {
  const calls: number[][] = [];
  const deadLetters: DeadLetterEvent[] = [];
  const member = new CoordinatedMember<KeyedPayload>(client, {
    streamPrefix,
    consumerGroup: 'group',
    memberId: options.memberId,
    shardCount: options.shardCount ?? 1,
    maxAttempts: options.maxAttempts ?? 3,
    retryBackoffMs: 10,
    maxBufferedEntries: options.maxBufferedEntries,
    coordinator: { heartbeatIntervalMs: 200 },
    batch: { maxSize: options.maxSize, maxWaitMs: options.maxWaitMs },
    handler: async (messages: StreamMessage<KeyedPayload>[]) => {
      calls.push(messages.map((m) => m.payload.seq));
      return work(messages, calls.length);
    },
  });
  member.on('error', () => undefined);
  member.on('dead-letter', (event) => deadLetters.push(event));
  started.push(member);
  await member.start();
  return { member, calls, deadLetters };
}

const entries = (from: number, to: number) =>
  Array.from({ length: to - from + 1 }, (_, i) => ({ key: `k${(from + i) % 3}`, payload: { seq: from + i }, shardIndex: 0 }));

async function settled(streamPrefix: string) {
  await pollUntil('nothing pending or unread', async () =>
    (await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group')).shards.every((s) => s.pending === 0 && s.lag === 0),
  );
}

describe('batch handlers', () => {
  it("get one shard's entries in order, at most maxSize per call, acknowledged together", async () => {
    const streamPrefix = uniqueName('batch');
    const { calls } = await aBatchMember(streamPrefix, { maxSize: 10 });
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(entries(1, 95));
    await pollUntil('95 entries handled', async () => calls.flat().length === 95);
    expect(calls.flat()).toEqual(entries(1, 95).map((e) => e.payload.seq));
    expect(Math.max(...calls.map((c) => c.length))).toBe(10);
    await settled(streamPrefix);
  });

  it('a short batch waits up to maxWaitMs for more entries', async () => {
    const streamPrefix = uniqueName('batch-wait');
    const { calls } = await aBatchMember(streamPrefix, { maxSize: 10, maxWaitMs: 600 });
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(entries(1, 1));
    await new Promise((resolve) => setTimeout(resolve, 150));
    await producer.sendBatch(entries(2, 3));
    await pollUntil('3 entries handled', async () => calls.flat().length === 3);
    expect(calls).toEqual([[1, 2, 3]]);
  });

  it("a short batch whose missing entries are in the stream reads them, not waiting out maxWaitMs, when the buffer has room for them though not for half a shard's share", async () => {
    // maxBufferedEntries = maxSize = 10: six entries queued leave room for the four that fill the
    // batch. The read floor under a full buffer (half a shard's share, 5) kept the loop from reading
    // them, and nothing ran to make more room: the batch waited its whole maxWaitMs (up to a day).
    const streamPrefix = uniqueName('batch-fill');
    const { member, calls } = await aBatchMember(streamPrefix, { maxSize: 10, maxWaitMs: 120_000, maxBufferedEntries: 10 });
    await pollUntil('the shard is owned', async () => member.ownedShards().length === 1);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(entries(1, 6));
    await pollUntil('six entries queued for the batch', async () => member.stats().bufferedEntries === 6);
    await producer.sendBatch(entries(7, 10));
    await pollUntil('one full batch', async () => calls.length === 1 && calls[0].length === 10, { timeoutMs: 15_000 });
    expect(calls[0]).toEqual(entries(1, 10).map((e) => e.payload.seq));
    await settled(streamPrefix);
  });

  it("the same, for a member sharing its read connection: the short batch is read again, not left to the doorbell's refill point", async () => {
    // Two members on one client share the hub's read connection; a shard was read again only once
    // its queue ran down to half its share (5 of 10): six queued waiting for a full batch never did.
    const streamPrefix = uniqueName('batch-fill-shared');
    const client = redis.client();
    const first = await aBatchMember(
      streamPrefix,
      { maxSize: 10, maxWaitMs: 120_000, maxBufferedEntries: 10, shardCount: 2, memberId: 'm0' },
      undefined,
      client,
    );
    const second = await aBatchMember(
      streamPrefix,
      { maxSize: 10, maxWaitMs: 120_000, maxBufferedEntries: 10, shardCount: 2, memberId: 'm1' },
      undefined,
      client,
    );
    await pollUntil('one shard each', async () => first.member.ownedShards().length === 1 && second.member.ownedShards().length === 1);
    const owner = first.member.ownedShards()[0] === 0 ? first : second;
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(entries(1, 6));
    await pollUntil('six entries queued for the batch', async () => owner.member.stats().bufferedEntries === 6);
    await producer.sendBatch(entries(7, 10));
    await pollUntil('one full batch', async () => owner.calls.length === 1 && owner.calls[0].length === 10, { timeoutMs: 15_000 });
    expect(owner.calls[0]).toEqual(entries(1, 10).map((e) => e.payload.seq));
    await settled(streamPrefix);
  });

  it('batches of several shards that fill the buffer between them run short at once, not each after maxWaitMs', async () => {
    // 4 shards with batches of 10 share 20 places: each shard's share is 5, every place is taken by
    // a batch waiting to fill, nothing can be read, and no handler runs to make room. Each round of
    // batches waited out maxWaitMs (160 entries took 8 x maxWaitMs).
    const streamPrefix = uniqueName('batch-full-buffer');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 4 });
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
      [0, 1, 2, 3].flatMap((shardIndex) =>
        Array.from({ length: 40 }, (_, i) => ({ key: `k${i % 3}`, payload: { seq: shardIndex * 100 + i }, shardIndex })),
      ),
    );
    const { calls } = await aBatchMember(streamPrefix, { maxSize: 10, maxWaitMs: 120_000, maxBufferedEntries: 20, shardCount: 4 });
    // Each shard's last short batch may wait (there is room again, and nothing more to read): at
    // most 4 x 9 entries. Before, none ran until maxWaitMs passed.
    await pollUntil('all but the last short batches handled', async () => calls.flat().length >= 160 - 4 * 9, { timeoutMs: 15_000 });
    for (const shardIndex of [0, 1, 2, 3]) {
      const seqs = calls.flat().filter((seq) => Math.floor(seq / 100) === shardIndex);
      expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => shardIndex * 100 + i));
    }
  });

  it('a BatchError acknowledges the entries before the failed one and retries from it; used up, only that entry is dead-lettered', async () => {
    const streamPrefix = uniqueName('batch-partial');
    const { calls, deadLetters } = await aBatchMember(streamPrefix, { maxSize: 5, maxAttempts: 2 }, (messages) => {
      const bad = messages.findIndex((m) => m.payload.seq === 3);
      if (bad >= 0) throw new BatchError(bad, new Error(`row ${messages[bad].payload.seq} refused`));
    });
    const written = await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(entries(1, 5));
    await pollUntil('a dead letter and the rest handled', async () => deadLetters.length === 1 && calls.length === 3);
    expect(calls).toEqual([
      [1, 2, 3, 4, 5],
      [3, 4, 5],
      [4, 5],
    ]);
    expect(deadLetters[0]).toMatchObject({ id: written[2].id, attempts: 2, cause: 'attempts-exhausted', reason: 'Error: row 3 refused' });
    await settled(streamPrefix);
  });

  it('a plain failure retries the whole batch; used up, every entry is dead-lettered, each on its own', async () => {
    const streamPrefix = uniqueName('batch-fail');
    const { calls, deadLetters } = await aBatchMember(streamPrefix, { maxSize: 5, maxAttempts: 2 }, () => {
      throw new Error('database down');
    });
    const written = await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(entries(1, 3));
    await pollUntil('3 dead letters', async () => deadLetters.length === 3);
    expect(calls).toEqual([
      [1, 2, 3],
      [1, 2, 3],
    ]);
    expect(deadLetters.map((d) => d.id)).toEqual(written.map((w) => w.id));
    expect(deadLetters.every((d) => d.attempts === 2 && d.reason === 'Error: database down')).toBe(true);
    await settled(streamPrefix);
  });

  it('refuses a batch with manual acks, a maxSize past batchSize, and a bad maxSize', () => {
    const base = { streamPrefix: 'x', consumerGroup: 'g', handler: (messages: StreamMessage[]) => messages };
    expect(() => new CoordinatedMember(redis.client(), { ...base, batch: { maxSize: 10 }, ackMode: 'manual' })).toThrow(
      /batch and ackMode 'manual' cannot be combined/,
    );
    expect(() => new CoordinatedMember(redis.client(), { ...base, batch: { maxSize: 200 }, batchSize: 100 })).toThrow(
      'batch.maxSize (200) must not exceed batchSize (100)',
    );
    expect(() => new CoordinatedMember(redis.client(), { ...base, batch: { maxSize: 0 } })).toThrow(
      'batch.maxSize must be an integer from 1 to 10000, got 0',
    );
    expect(() => new CoordinatedMember(redis.client(), { ...base, batch: { maxSize: 5, maxWaitMs: -1 } })).toThrow(
      'batch.maxWaitMs must be an integer from 0 to 86400000, got -1',
    );
  });
});
