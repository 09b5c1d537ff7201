import { type StreamMessage, StreamProducer } from '@redis-stream-coordinator/core';
import { expect } from 'vitest';
import { uniqueName } from '../support/vitest-redis';
import { drained, type EdgeCase, type EdgePayload, Handled, handOff, maxOf, produce, STOP_BOUND_MS } from './edge-kit';

/** A member option at its maximum through the hand-off run (edge-kit.ts): joins, rebalances, a graceful stop, a takeover. */
const inHandOff = (row: Parameters<typeof maxOf>[0], option: string): EdgeCase => ({
  title: `${option} at its maximum: two members hand shards over and back, every entry handled once`,
  covers: [row],
  tier: 'quick',
  timeoutMs: 60_000,
  run: (env) => handOff(env, { member: () => ({ [option]: maxOf(row) }) }).then(() => undefined),
});

/** The member's options and its consumption options (lanes, batches, manual acks, dead letters), at their maxima. */
export const MEMBER_CASES: EdgeCase[] = [
  inHandOff('member.sessionTimeoutMs', 'sessionTimeoutMs'),
  {
    title: 'rebalanceTimeoutMs and revocationTimeoutMs at their maximum: a revocation still completes as soon as its work is done',
    covers: ['member.rebalanceTimeoutMs', 'member.revocationTimeoutMs'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: (env) =>
      handOff(env, {
        member: () => ({
          rebalanceTimeoutMs: maxOf('member.rebalanceTimeoutMs'),
          revocationTimeoutMs: maxOf('member.revocationTimeoutMs'),
        }),
      }).then(() => undefined),
  },
  inHandOff('member.shutdownTimeoutMs', 'shutdownTimeoutMs'),
  inHandOff('member.handlerTimeoutMs', 'handlerTimeoutMs'),
  inHandOff('member.handlerStallMs', 'handlerStallMs'),
  inHandOff('member.sweepIntervalMs', 'sweepIntervalMs'),
  inHandOff('member.cutoverCheckIntervalMs', 'cutoverCheckIntervalMs'),
  {
    title:
      'blockMs at its maximum: an entry written while a read blocks is handled within a second; stop() and revocations cut the read short',
    covers: ['member.blockMs'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const run = await handOff(env, { member: () => ({ blockMs: maxOf('member.blockMs') }) });
      // b owns every shard now and blocks in its read: one more entry, timed.
      const written = performance.now();
      const [id] = await produce(run.producer, 1, 1000);
      await run.handled.all([id], 1000);
      expect(performance.now() - written).toBeLessThan(1000);
    },
  },
  {
    title: 'weight at its maximum: the heavy member takes every shard, the light one none; when it leaves the light one takes them all',
    covers: ['member.weight'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const run = await handOff(env, {
        member: (id) => (id === 'a' ? { weight: maxOf('member.weight') } : {}),
        whileBoth: async ({ members }) => {
          expect(members.a.ownedShards()).toHaveLength(4);
          expect(members.b.ownedShards()).toEqual([]);
        },
      });
      expect(run.members.b.ownedShards()).toHaveLength(4);
    },
  },
  {
    title:
      'maxAttempts at its maximum (no backoff): an entry failing every attempt but the last is handled, one failing all is dead-lettered',
    covers: ['member.maxAttempts'],
    tier: 'slow',
    timeoutMs: 60_000,
    run: async (env) => {
      const attempts = maxOf('member.maxAttempts');
      const streamPrefix = uniqueName('edge-attempts');
      const admin = env.admin();
      await admin.createStream({ streamPrefix, shardCount: 1 });
      const tries = new Map<number, number>();
      const member = env.member(streamPrefix, 'a', {
        maxAttempts: attempts,
        retryBackoffMs: 0,
        retryBackoffMaxMs: 0,
        handler: (message: StreamMessage<EdgePayload>) => {
          const n = (tries.get(message.payload.seq) ?? 0) + 1;
          tries.set(message.payload.seq, n);
          if (message.payload.seq === 1 || n < attempts) throw new Error(`attempt ${n}`);
        },
      });
      await member.start();
      await produce(new StreamProducer(env.redis.client(), { streamPrefix }), 2);
      await drained(admin, streamPrefix, 30_000);
      expect([tries.get(0), tries.get(1)]).toEqual([attempts, attempts]);
      const letters = await admin.readDeadLetters(streamPrefix, 'group');
      expect(letters.map((l) => [l.key, l.attempts])).toEqual([['k1', attempts]]);
    },
  },
  {
    title:
      "retryBackoffMs, retryBackoffMaxMs and nack's retryAfterMs at their maximum: entries waiting out a day-long backoff or nack hold no other key, and are handed over and handled when their member stops",
    covers: ['member.retryBackoffMs', 'member.retryBackoffMaxMs', 'member.nack.retryAfterMs'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const streamPrefix = uniqueName('edge-backoff');
      const admin = env.admin();
      await admin.createStream({ streamPrefix, shardCount: 1 });
      const handled = new Handled();
      const failed = new Set<string>();
      // Manual acks: k0's first entry throws (a day's backoff), k1's is nacked with a day's retryAfterMs.
      const options = (fail: boolean) => ({
        lanes: 3,
        ackMode: 'manual' as const,
        retryBackoffMs: maxOf('member.retryBackoffMs'),
        retryBackoffMaxMs: maxOf('member.retryBackoffMaxMs'),
        handler: async (message: StreamMessage<EdgePayload>) => {
          if (fail && (message.key === 'k0' || message.key === 'k1') && !failed.has(message.key)) {
            failed.add(message.key);
            if (message.key === 'k0') throw new Error('the first attempt fails');
            return message.nack({ retryAfterMs: maxOf('member.nack.retryAfterMs'), reason: 'the first attempt is nacked' });
          }
          handled.add(message);
          await message.ack();
        },
      });
      const a = env.member(streamPrefix, 'a', options(true));
      await a.start();
      const producer = new StreamProducer(env.redis.client(), { streamPrefix });
      const ids = await produce(producer, 10);
      // k0's and k1's first entries wait out a day; the other keys' entries (their own lanes) go on.
      const others = ids.filter((_, i) => i % 5 > 1);
      await handled.all(others);
      expect(
        ids.slice(0, 2).filter((id) => handled.runs.has(id)),
        'the failed and the nacked entry, waiting a day',
      ).toEqual([]);
      const stopping = performance.now();
      await a.stop();
      expect(performance.now() - stopping, 'stop() during a day-long backoff and nack').toBeLessThan(STOP_BOUND_MS);
      await env.member(streamPrefix, 'b', options(false)).start();
      await handled.all(ids);
      await drained(admin, streamPrefix);
    },
  },
  {
    title: "ackTimeoutMs at its maximum (ackMode 'manual'): entries acked by the handler are handed over and back, each once",
    covers: ['member.ackTimeoutMs'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: (env) =>
      handOff(env, {
        member: () => ({ ackMode: 'manual', ackTimeoutMs: maxOf('member.ackTimeoutMs') }),
        work: (message) => message.ack(),
      }).then(() => undefined),
  },
  {
    title:
      'batch.maxWaitMs at its maximum: full batches go at once, a short one waits, and is handed over and handled when its member stops',
    covers: ['member.batch.maxWaitMs'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const streamPrefix = uniqueName('edge-batch-wait');
      const admin = env.admin();
      await admin.createStream({ streamPrefix, shardCount: 1 });
      const sizes: number[] = [];
      const handled = new Handled();
      const a = env.member(streamPrefix, 'a', {
        batch: { maxSize: 10, maxWaitMs: maxOf('member.batch.maxWaitMs') },
        handler: (messages: StreamMessage<EdgePayload>[]) => {
          sizes.push(messages.length);
          for (const message of messages) handled.add(message);
        },
      });
      await a.start();
      const ids = await produce(new StreamProducer(env.redis.client(), { streamPrefix }), 25);
      await handled.all(ids.slice(0, 20));
      expect(sizes).toEqual([10, 10]);
      const stopping = performance.now();
      await a.stop();
      expect(performance.now() - stopping, 'stop() with a short batch waiting a day').toBeLessThan(STOP_BOUND_MS);
      expect(handled.runs.size).toBe(20);
      await env.member(streamPrefix, 'b', { handler: (message: StreamMessage<EdgePayload>) => handled.add(message) }).start();
      await handled.all(ids);
      await drained(admin, streamPrefix);
      handled.once(ids);
    },
  },
];
