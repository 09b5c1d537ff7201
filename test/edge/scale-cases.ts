import { CoordinatedMember, CoordinatorAdmin, KeyBuilder, type StreamMessage, StreamProducer } from '@redis-stream-coordinator/core';
import { RedisCluster } from '@redis-stream-coordinator/core/testing';
import { Cluster } from 'ioredis';
import { expect } from 'vitest';
import { pollUntil } from '../support/poll';
import { uniqueName } from '../support/vitest-redis';
import { drained, type EdgeCase, type EdgeEnv, type EdgePayload, entryOf, Handled, maxOf, STOP_BOUND_MS } from './edge-kit';

const keys = new KeyBuilder();

/**
 * `count` entries on `shard` of the stream in one pipeline (producer fields, `k0`…`k6`), optionally
 * read at once by `consumer` in the same transaction: pending there, delivered to nobody else.
 */
async function entriesOn(env: EdgeEnv, streamPrefix: string, shard: number, count: number, consumer?: string): Promise<string[]> {
  const stream = keys.shardStream(streamPrefix, shard);
  const multi = env.redis.client().multi();
  for (let seq = 0; seq < count; seq++) multi.xadd(stream, '*', 'p', JSON.stringify({ seq }), 'k', `k${seq % 7}`);
  if (consumer !== undefined) multi.xreadgroup('GROUP', 'group', consumer, 'COUNT', count, 'STREAMS', stream, '>');
  const replies = (await multi.exec()) ?? [];
  return replies.slice(0, count).map(([, id]) => `${shard}/${String(id)}`);
}

/** A batch member's calls: their sizes, and every entry they handled (by `entryOf`). */
class Batches {
  readonly sizes: number[] = [];
  readonly handled = new Handled();

  handler = async (messages: StreamMessage<EdgePayload>[]) => {
    this.sizes.push(messages.length);
    for (const message of messages) this.handled.add(message);
  };
}

const MAX_BATCH = maxOf('member.batch.maxSize');

/** Batch, buffer and concurrency options at their maxima, and streams of the most shards: the slow tier. */
export const SCALE_CASES: EdgeCase[] = [
  {
    title:
      'the largest test cluster (RedisCluster.start with masters, replicasPerMaster and nodeTimeoutMs at their maximum): every node joins, every master serves slots, a member on it handles an entry of every shard',
    covers: ['testing.cluster.masters', 'testing.cluster.replicasPerMaster', 'testing.cluster.nodeTimeoutMs'],
    tier: 'slow',
    timeoutMs: 300_000,
    run: async (env) => {
      const masters = maxOf('testing.cluster.masters');
      const cluster = await RedisCluster.start({
        masters,
        replicasPerMaster: maxOf('testing.cluster.replicasPerMaster'),
        nodeTimeoutMs: maxOf('testing.cluster.nodeTimeoutMs'),
      });
      env.onEnd(() => cluster.stop());
      expect(cluster.servers).toHaveLength(masters * (1 + maxOf('testing.cluster.replicasPerMaster')));
      const client = new Cluster(cluster.startupNodes);
      client.on('error', () => undefined);
      env.onEnd(() => client.disconnect());
      await pollUntil('every master serving slots', async () => client.nodes('master').length === masters, { timeoutMs: 60_000 });
      const streamPrefix = uniqueName('edge-cluster');
      await new CoordinatorAdmin(client).createStream({ streamPrefix, shardCount: masters });
      const handled = new Handled();
      const member = new CoordinatedMember<EdgePayload>(client, {
        streamPrefix,
        consumerGroup: 'group',
        handler: (message) => handled.add(message),
      });
      env.onEnd(() => member.stop());
      await member.start();
      const producer = new StreamProducer(client, { streamPrefix });
      const results = await producer.sendBatch(Array.from({ length: masters }, (_, seq) => ({ payload: { seq }, shardIndex: seq })));
      await handled.all(results.map(entryOf), 60_000);
    },
  },
  {
    title: `the most shards: members (shardCount at its maximum) join, consume on the first and the last shard, share them, shrink and grow back to the maximum, leave and take over`,
    covers: ['shardCount', 'shardIndex'],
    tier: 'slow',
    timeoutMs: 900_000,
    run: async (env) => {
      const count = maxOf('shardCount');
      const streamPrefix = uniqueName('edge-shards');
      const admin = env.admin();
      await admin.createStream({ streamPrefix, shardCount: count });
      const handled = new Handled();
      const start = async (memberId: string) => {
        const member = env.member(streamPrefix, memberId, {
          shardCount: count,
          handler: (message: StreamMessage<EdgePayload>) => handled.add(message),
        });
        await member.start();
        return member;
      };
      const producer = new StreamProducer(env.redis.client(), { streamPrefix, shardCount: count, metadataRefreshMs: 100 });
      const some = [0, 1, count / 2 - 1, count / 2, maxOf('shardIndex')];
      let seq = 0;
      const consumed = async () => {
        const results = await producer.sendBatch(some.map((shardIndex) => ({ payload: { seq: seq++ }, shardIndex })));
        await handled.all(results.map(entryOf), 180_000);
      };
      // Each step's time, said when a step runs out (the time a step takes grows with the machine's load).
      const laps: string[] = [];
      const began = performance.now();
      const step = async (what: string, done: () => Promise<unknown>) => {
        await done().catch((error: Error) => {
          throw new Error(`${what}: ${error.message} (steps before: ${laps.join(', ')})`);
        });
        laps.push(`${what} ${Math.round((performance.now() - began) / 1000)} s`);
      };
      const owns = (member: { ownedShards(): number[] }, n: number) =>
        pollUntil(`${n} shards owned`, async () => member.ownedShards().length === n, { timeoutMs: 180_000, intervalMs: 200 });
      const a = await start('a');
      await step('a owns every shard', () => owns(a, count));
      await step('a handles', consumed);
      const b = await start('b');
      await step('a and b own half each', async () => {
        await owns(a, count / 2);
        await owns(b, count / 2);
      });
      await step('both handle', consumed);
      // Down one shard and back to the most, both unordered (only the last shard changes hands).
      await admin.resizeShards(streamPrefix, count - 1, { ordered: false });
      await step('the shrink taken', () =>
        pollUntil('one shard fewer owned', async () => a.ownedShards().length + b.ownedShards().length === count - 1, {
          timeoutMs: 180_000,
        }),
      );
      await admin.resizeShards(streamPrefix, count, { ordered: false });
      await step('the growth taken', () =>
        pollUntil('every shard owned', async () => a.ownedShards().length + b.ownedShards().length === count, { timeoutMs: 180_000 }),
      );
      await step('both handle', consumed);
      await step('a stops', () => a.stop());
      await step('b owns every shard', () => owns(b, count));
      await step('b handles', consumed);
      console.info(`the most shards (${count}): ${laps.join(', ')}`);
      expect(env.errors).toEqual([]);
    },
  },
  {
    title: 'batch.maxSize and batchSize at their maximum: full batches of one call each, through a hand-off mid-way and a takeover',
    covers: ['member.batch.maxSize', 'member.batchSize'],
    tier: 'slow',
    timeoutMs: 180_000,
    run: async (env) => {
      const streamPrefix = uniqueName('edge-batches');
      const admin = env.admin();
      await admin.createStream({ streamPrefix, shardCount: 2 });
      const batches = new Batches();
      const start = async (memberId: string) => {
        const member = env.member(streamPrefix, memberId, {
          batchSize: maxOf('member.batchSize'),
          maxBufferedEntries: 2 * MAX_BATCH,
          batch: { maxSize: MAX_BATCH },
          handler: batches.handler,
        });
        await member.start();
        return member;
      };
      const written: string[] = [];
      const write = async () => {
        for (const shard of [0, 1]) written.push(...(await entriesOn(env, streamPrefix, shard, MAX_BATCH)));
      };
      await write();
      const a = await start('a');
      await batches.handled.all(written, 60_000);
      // More of them, and b joins while a works on them: one shard changes hands with its batch in flight.
      await write();
      const b = await start('b');
      await batches.handled.all(written, 60_000);
      const stopping = performance.now();
      await a.stop();
      expect(performance.now() - stopping).toBeLessThan(STOP_BOUND_MS);
      await pollUntil('b owns both shards', async () => b.ownedShards().length === 2, { timeoutMs: 30_000 });
      await write();
      await batches.handled.all(written, 60_000);
      await drained(admin, streamPrefix, 30_000);
      batches.handled.once(written);
      expect(batches.sizes.every((n) => n <= MAX_BATCH)).toBe(true);
      expect(batches.sizes.filter((n) => n === MAX_BATCH).length).toBeGreaterThanOrEqual(4);
      expect(env.errors).toEqual([]);
    },
  },
  ...(
    [
      ['taken over from a former owner when the shard is gained', 'before'],
      ["swept from another consumer (a zombie's late read)", 'zombie'],
      ['recovered from its own name when it does not track them (a lost read reply)', 'own'],
    ] as const
  ).map(
    ([how, where]): EdgeCase => ({
      title: `batch.maxSize entries at its maximum pending are ${how}, and handled in one call`,
      covers: ['member.batch.maxSize', 'member.batchSize'],
      tier: 'slow',
      timeoutMs: 120_000,
      run: async (env) => {
        const streamPrefix = uniqueName('edge-claim');
        const admin = env.admin();
        await admin.createStream({ streamPrefix, shardCount: 1 });
        await env.redis.client().xgroup('CREATE', keys.shardStream(streamPrefix, 0), 'group', '0', 'MKSTREAM');
        let pending: string[] = [];
        if (where === 'before') pending = await entriesOn(env, streamPrefix, 0, MAX_BATCH, 'former-owner');
        const batches = new Batches();
        const member = env.member(streamPrefix, 'a', {
          batchSize: maxOf('member.batchSize'),
          maxBufferedEntries: MAX_BATCH,
          sweepIntervalMs: 200,
          batch: { maxSize: MAX_BATCH },
          handler: batches.handler,
        });
        await member.start();
        await pollUntil('the shard owned', async () => member.ownedShards().length === 1);
        if (where !== 'before') pending = await entriesOn(env, streamPrefix, 0, MAX_BATCH, where === 'own' ? 'a' : 'zombie');
        await batches.handled.all(pending, 60_000);
        await drained(admin, streamPrefix, 30_000);
        expect(batches.sizes).toEqual([MAX_BATCH]);
      },
    }),
  ),
  {
    title:
      'lanes and runtimeMaxConcurrency at their maximum: as many keys of one shard run at once, read batchSize at a time, and are all acknowledged',
    covers: ['member.lanes', 'member.runtimeMaxConcurrency'],
    tier: 'slow',
    timeoutMs: 120_000,
    run: async (env) => {
      const streamPrefix = uniqueName('edge-lanes');
      const count = Math.min(maxOf('member.lanes'), maxOf('member.runtimeMaxConcurrency'));
      const admin = env.admin();
      await admin.createStream({ streamPrefix, shardCount: 1 });
      // One key per entry: each may take its own lane.
      await new StreamProducer(env.redis.client(), { streamPrefix }).sendBatch(
        Array.from({ length: count }, (_, i) => ({ key: `key-${i}`, payload: { seq: i }, shardIndex: 0 })),
      );
      let openGate: () => void = () => undefined;
      const gate = new Promise<void>((resolve) => (openGate = resolve));
      let running = 0;
      let most = 0;
      let handled = 0;
      const member = env.member(streamPrefix, 'a', {
        lanes: maxOf('member.lanes'),
        runtimeMaxConcurrency: maxOf('member.runtimeMaxConcurrency'),
        batchSize: maxOf('member.batchSize'),
        maxBufferedEntries: maxOf('member.batchSize'),
        handler: async () => {
          running += 1;
          most = Math.max(most, running);
          await gate;
          running -= 1;
          handled += 1;
        },
      });
      await member.start();
      await pollUntil(`${count} handlers running at once`, async () => running === count, { timeoutMs: 60_000 }).catch((error: Error) => {
        throw new Error(`${error.message} (at most ${most}, ${member.stats().bufferedEntries} buffered); errors: ${env.errors.join('; ')}`);
      });
      openGate();
      await pollUntil('every entry handled', async () => handled === count, { timeoutMs: 60_000 });
      await drained(admin, streamPrefix, 30_000);
      expect(most).toBe(count);
    },
  },
  {
    title:
      'maxBufferedEntries and maxBufferedEntriesPerClient at their maximum: a member fills its buffer to it from many shards read batchSize at a time, then handles every entry',
    covers: ['member.maxBufferedEntries', 'member.maxBufferedEntriesPerClient'],
    tier: 'slow',
    timeoutMs: 600_000,
    run: async (env) => {
      const most = maxOf('member.maxBufferedEntries');
      const perShard = maxOf('member.batchSize');
      const shards = Math.ceil(most / perShard);
      const streamPrefix = uniqueName('edge-buffer');
      const admin = env.admin();
      await admin.createStream({ streamPrefix, shardCount: shards });
      const written: string[] = [];
      for (let shard = 0; shard < shards; shard++) written.push(...(await entriesOn(env, streamPrefix, shard, perShard)));
      let openGate: () => void = () => undefined;
      const gate = new Promise<void>((resolve) => (openGate = resolve));
      const handled = new Handled();
      const member = env.member(streamPrefix, 'a', {
        maxBufferedEntries: most,
        maxBufferedEntriesPerClient: maxOf('member.maxBufferedEntriesPerClient'),
        batchSize: perShard,
        runtimeMaxConcurrency: 64,
        handler: async (message: StreamMessage<EdgePayload>) => {
          await gate;
          handled.add(message);
        },
      });
      await member.start();
      let fullest = 0;
      await pollUntil(
        `${most} entries buffered`,
        async () => {
          fullest = Math.max(fullest, member.stats().bufferedEntries);
          return fullest >= most - shards;
        },
        { timeoutMs: 300_000, intervalMs: 200 },
      ).catch((error: Error) => {
        throw new Error(`${error.message} (at most ${fullest}); errors: ${env.errors.join('; ')}`);
      });
      expect(fullest).toBeLessThanOrEqual(most);
      expect(member.stats().clientBuffer.peakEntries).toBeLessThanOrEqual(most);
      openGate();
      await handled.all(written, 300_000);
      await drained(admin, streamPrefix, 120_000);
    },
  },
];
