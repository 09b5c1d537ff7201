import { type StreamMessage, StreamProducer, type TrimRun } from '@redis-stream-coordinator/core';
import { expect } from 'vitest';
import { pollUntil } from '../support/poll';
import { uniqueName } from '../support/vitest-redis';
import { drained, type EdgeCase, type EdgePayload, Handled, maxOf, produce, STOP_BOUND_MS } from './edge-kit';

/** The admin API's options (resizes, dead letters, retention, events), at their maxima. */
export const ADMIN_CASES: EdgeCase[] = [
  {
    title:
      'graceMs at its maximum: an ordered growth waits out the grace (the new shard not readable, its entries kept for it), the old shards are read on, stop() returns at once',
    covers: ['admin.resizeShards.graceMs'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const streamPrefix = uniqueName('edge-grace');
      const admin = env.admin();
      await admin.createStream({ streamPrefix, shardCount: 2 });
      const handled = new Handled();
      const member = env.member(streamPrefix, 'a', { handler: (message: StreamMessage<EdgePayload>) => handled.add(message) });
      await member.start();
      await admin.resizeShards(streamPrefix, 3, { graceMs: maxOf('admin.resizeShards.graceMs'), switchDelayMs: 0 });
      const producer = new StreamProducer(env.redis.client(), { streamPrefix, metadataRefreshMs: 50 });
      const written = await produce(producer, 40);
      const onNew = written.filter((e) => e.startsWith('2/'));
      expect(onNew.length).toBeGreaterThan(0);
      await handled.all(written.filter((e) => !e.startsWith('2/')));
      const d = await admin.describeGroup(streamPrefix, 'group');
      expect([d.group.readableShardSet, d.shards.find((s) => s.shardIndex === 2)?.lag]).toEqual([[0, 1], onNew.length]);
      const [status] = await admin.cutoverStatus(streamPrefix);
      expect(status.cutover).not.toBeNull();
      const stopping = performance.now();
      await member.stop();
      expect(performance.now() - stopping).toBeLessThan(STOP_BOUND_MS);
    },
  },
  {
    title:
      'switchDelayMs at its maximum: after an ordered shrink producers keep the old count until the switch, the removed shard is read on, and every entry is handled',
    covers: ['admin.resizeShards.switchDelayMs'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const streamPrefix = uniqueName('edge-switch');
      const admin = env.admin();
      await admin.createStream({ streamPrefix, shardCount: 3 });
      const handled = new Handled();
      const member = env.member(streamPrefix, 'a', { handler: (message: StreamMessage<EdgePayload>) => handled.add(message) });
      await member.start();
      await admin.resizeShards(streamPrefix, 2, { switchDelayMs: maxOf('admin.resizeShards.switchDelayMs') });
      const written = await produce(new StreamProducer(env.redis.client(), { streamPrefix, metadataRefreshMs: 50 }), 40);
      expect(written.filter((e) => e.startsWith('2/')).length).toBeGreaterThan(0);
      await handled.all(written);
      await drained(admin, streamPrefix);
    },
  },
  {
    title:
      'readSchedule count at its maximum: 1,001 delayed entries listed in two pages, each once, in due order; every one made due is handled',
    covers: ['admin.readSchedule.count'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const streamPrefix = uniqueName('edge-schedule');
      const admin = env.admin();
      await admin.createStream({ streamPrefix, shardCount: 1 });
      const count = maxOf('admin.readSchedule.count');
      const producer = new StreamProducer(env.redis.client(), { streamPrefix });
      const dueFrom = Date.now() + 3_600_000;
      const sent = await producer.sendBatch(
        Array.from({ length: count + 1 }, (_, i) => ({ key: `k${i}`, payload: { seq: i }, deliverAt: dueFrom + (count - i) })),
      );
      const first = await admin.readSchedule({ streamPrefix, shardIndex: 0 }, { count });
      const second = await admin.readSchedule({ streamPrefix, shardIndex: 0 }, { count, after: first.next! });
      const listed = [...first.entries, ...second.entries];
      expect([first.total, first.entries.length, second.entries.length, second.next]).toEqual([count + 1, count, 1, null]);
      // Due order: the last sent is due first.
      expect(listed.map((e) => e.id)).toEqual(sent.map((s) => s.id).reverse());
      const handled = new Handled();
      await env.member(streamPrefix, 'a', { handler: (message: StreamMessage<EdgePayload>) => handled.add(message) }).start();
      expect(await admin.releaseAllScheduled({ streamPrefix })).toBe(count + 1);
      await pollUntil('every entry made due handled', async () => handled.runs.size === count + 1, { timeoutMs: 30_000 });
    },
  },
  {
    title:
      'readDeadLetters count and replay takeOverAfterMs at their maximum: every dead letter listed, replayed once and handled; deadLetter.maxLen at its maximum keeps them all',
    covers: ['admin.readDeadLetters.count', 'admin.replay.takeOverAfterMs', 'member.deadLetter.maxLen'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const streamPrefix = uniqueName('edge-letters');
      const admin = env.admin();
      await admin.createStream({ streamPrefix, shardCount: 2 });
      let failing = true;
      const handled = new Handled();
      const member = env.member(streamPrefix, 'a', {
        maxAttempts: 1,
        deadLetter: { maxLen: maxOf('member.deadLetter.maxLen') },
        handler: (message: StreamMessage<EdgePayload>) => {
          if (failing && message.key === 'k0') throw new Error('dead-letter me');
          handled.add(message);
        },
      });
      await member.start();
      await produce(new StreamProducer(env.redis.client(), { streamPrefix }), 20);
      await drained(admin, streamPrefix);
      const letters = await admin.readDeadLetters(streamPrefix, 'group', { count: maxOf('admin.readDeadLetters.count') });
      expect(letters.map((l) => l.key)).toEqual(['k0', 'k0', 'k0', 'k0']);
      failing = false;
      const replays = await admin.replayDeadLetters(streamPrefix, 'group', {}, { takeOverAfterMs: maxOf('admin.replay.takeOverAfterMs') });
      expect(replays.map((r) => r.status)).toEqual(['replayed', 'replayed', 'replayed', 'replayed']);
      await handled.all(replays.map((r) => `${r.to!.shardIndex}/${r.to!.id}`));
      expect(await admin.readDeadLetters(streamPrefix, 'group')).toEqual([]);
    },
  },
  {
    title:
      'trim maxLen, startTrimming intervalMs and runTimeoutMs at their maximum: the first run trims what every group handled, the next is a day away, and stop() returns at once',
    covers: ['admin.trim.maxLen', 'admin.startTrimming.intervalMs', 'admin.startTrimming.runTimeoutMs'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const streamPrefix = uniqueName('edge-trim');
      const admin = env.admin();
      await admin.createStream({ streamPrefix, shardCount: 2 });
      const handled = new Handled();
      await env.member(streamPrefix, 'a', { handler: (message: StreamMessage<EdgePayload>) => handled.add(message) }).start();
      await handled.all(await produce(new StreamProducer(env.redis.client(), { streamPrefix }), 20));
      await drained(admin, streamPrefix);
      const once = await admin.trim(streamPrefix, { maxLen: maxOf('admin.trim.maxLen'), dryRun: true });
      expect(once.trimmed).toBeGreaterThan(0);
      const schedule = admin.startTrimming(streamPrefix, {
        intervalMs: maxOf('admin.startTrimming.intervalMs'),
        runTimeoutMs: maxOf('admin.startTrimming.runTimeoutMs'),
        maxLen: maxOf('admin.trim.maxLen'),
      });
      env.onEnd(() => schedule.stop());
      const runs: TrimRun[] = [];
      schedule.on('trimmed', (run) => runs.push(run));
      await pollUntil('the first run', async () => runs.length > 0);
      expect(runs[0].result.trimmed).toBe(once.trimmed);
      const stopping = performance.now();
      await schedule.stop();
      expect(performance.now() - stopping).toBeLessThan(STOP_BOUND_MS);
    },
  },
  {
    title: 'readGroupEvents blockMs at its maximum: a follow waiting for the next event returns as soon as a member joins',
    covers: ['admin.readGroupEvents.blockMs'],
    tier: 'quick',
    timeoutMs: 30_000,
    run: async (env) => {
      const streamPrefix = uniqueName('edge-events');
      const admin = env.admin();
      await admin.createStream({ streamPrefix, shardCount: 1 });
      await env.member(streamPrefix, 'a', { handler: () => undefined }).start();
      const [last] = (await admin.readGroupEvents(streamPrefix, 'group', { count: 1 })).slice(-1);
      const follow = admin.readGroupEvents(streamPrefix, 'group', { after: last.id, blockMs: maxOf('admin.readGroupEvents.blockMs') });
      const joining = performance.now();
      await env.member(streamPrefix, 'b', { handler: () => undefined }).start();
      const next = await follow;
      expect(next.length).toBeGreaterThan(0);
      expect(performance.now() - joining).toBeLessThan(STOP_BOUND_MS);
    },
  },
];
