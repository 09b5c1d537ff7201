import { KeyBuilder, type StreamMessage, StreamProducer } from '@redis-stream-coordinator/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { Redis } from 'ioredis';
import { expect } from 'vitest';
import { pollUntil } from '../support/poll';
import { uniqueName } from '../support/vitest-redis';
import { drained, type EdgeCase, type EdgeEnv, type EdgePayload, Handled, handOff, maxOf, produce } from './edge-kit';

/** A replica of the file's server, in sync: WAIT counts it. */
async function aReplica(env: EdgeEnv): Promise<void> {
  const replica = await RedisServer.start({ args: ['--replicaof', '127.0.0.1', String(env.redis.server.port)] });
  env.onEnd(() => replica.stop());
  const client = new Redis(replica.url);
  env.onEnd(() => client.disconnect());
  await pollUntil('the replica in sync', async () => /master_link_status:up/.test(await client.info('replication')), { timeoutMs: 15_000 });
}

/** The producer's options and the replica waits of producers and members, at their maxima. */
export const PRODUCER_CASES: EdgeCase[] = [
  {
    title: 'maxLenApprox at its maximum: nothing is trimmed from the shards as entries are written, handed over and handled',
    covers: ['producer.maxLenApprox'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const { streamPrefix } = await handOff(env, { producer: { maxLenApprox: maxOf('producer.maxLenApprox') } });
      const keys = new KeyBuilder();
      const lengths = await Promise.all([0, 1, 2, 3].map((shard) => env.redis.client().xlen(keys.shardStream(streamPrefix, shard))));
      expect(lengths.reduce((a, b) => a + b, 0)).toBe(60);
    },
  },
  {
    title:
      'metadataRefreshMs at its maximum: a producer whose count is an hour old writes across a growth, to the new count, and nothing is lost',
    covers: ['producer.metadataRefreshMs'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      await handOff(env, {
        producer: { metadataRefreshMs: maxOf('producer.metadataRefreshMs') },
        whileBoth: async ({ admin, streamPrefix }) => {
          await admin.resizeShards(streamPrefix, 5, { ordered: false });
        },
      });
    },
  },
  {
    title: 'appendTimeoutMs at its maximum: writes go as usual, handed over and handled',
    covers: ['producer.appendTimeoutMs'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: (env) => handOff(env, { producer: { appendTimeoutMs: maxOf('producer.appendTimeoutMs') } }).then(() => undefined),
  },
  {
    title:
      'delayMs at its maximum and deliverAt at its furthest (365 days ahead; a Date holds more, refused at the call): scheduled with their due times, kept while a member releases what is due beside them',
    covers: ['producer.send.delayMs', 'producer.send.deliverAt'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const streamPrefix = uniqueName('edge-delays');
      await env.admin().createStream({ streamPrefix, shardCount: 1 });
      const producer = new StreamProducer(env.redis.client(), { streamPrefix });
      const furthest = Date.now() + maxOf('producer.send.delayMs');
      await expect(producer.send({ payload: { seq: 0 }, deliverAt: maxOf('producer.send.deliverAt') })).rejects.toThrow(
        'deliverAt must be at most 365 days ahead',
      );
      const [late, at, soon] = await producer.sendBatch([
        { payload: { seq: 1 }, delayMs: maxOf('producer.send.delayMs') },
        { payload: { seq: 2 }, deliverAt: furthest },
        { payload: { seq: 3 }, delayMs: 1 },
      ]);
      expect(late.dueAt! - Date.now()).toBeGreaterThan(maxOf('producer.send.delayMs') - 60_000);
      expect(at.dueAt).toBe(furthest);
      expect(soon.dueAt).toBeDefined();
      const handled = new Handled();
      await env.member(streamPrefix, 'a', { handler: (message: StreamMessage<EdgePayload>) => handled.add(message) }).start();
      // The short one released and handled: the member checked the schedule, and kept the far ones.
      await pollUntil('the due entry handled', async () => handled.runs.size === 1, { timeoutMs: 30_000 });
      expect(await env.redis.client().zcard(new KeyBuilder().shardSchedule(streamPrefix, 0))).toBe(2);
    },
  },
  {
    title:
      'waitForReplicas and ackWaitForReplicas asking for the most replicas, with none there: writes fail NotReplicatedError, acks are reported and stay',
    covers: ['replicaWait.replicas'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const wait = { replicas: maxOf('replicaWait.replicas'), timeoutMs: 1 };
      const streamPrefix = uniqueName('edge-replicas');
      const admin = env.admin();
      await admin.createStream({ streamPrefix, shardCount: 2 });
      const producer = new StreamProducer(env.redis.client(), { streamPrefix, waitForReplicas: wait });
      await expect(produce(producer, 4)).rejects.toThrow(/replica/);
      const handled = new Handled();
      const member = env.member(streamPrefix, 'a', {
        ackWaitForReplicas: wait,
        handler: (message: StreamMessage<EdgePayload>) => handled.add(message),
      });
      await member.start();
      // The writes landed (WAIT came after them): the member handles and acknowledges them.
      await pollUntil('4 entries handled', async () => handled.runs.size === 4);
      await drained(admin, streamPrefix);
      await pollUntil('the shortfall reported', async () => env.errors.some((e) => /NotReplicated|replica/.test(e)));
    },
  },
  {
    title:
      'waitForReplicas and ackWaitForReplicas waiting their longest, with a replica in sync: writes and acks go at once, handed over and handled',
    covers: ['replicaWait.timeoutMs'],
    tier: 'slow',
    timeoutMs: 60_000,
    run: async (env) => {
      await aReplica(env);
      const wait = { replicas: 1, timeoutMs: maxOf('replicaWait.timeoutMs') };
      await handOff(env, { producer: { waitForReplicas: wait }, member: () => ({ ackWaitForReplicas: wait }) });
    },
  },
];
