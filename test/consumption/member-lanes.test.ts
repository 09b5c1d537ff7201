import { describe, expect, it } from 'vitest';
import { CoordinatedMember, CoordinatorAdmin, type StreamMessage, StreamProducer } from '@redis-stream-coordinator/core';
import { HandlerRecorder, type HandlerRun, keyedMessages, type KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const aMember = memberFactory(redis);
const aProxy = proxyFactory(redis);
const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Runs of one key (on one member) that overlapped in time: lanes must never do that. */
function keyOverlaps(runs: HandlerRun[]): string[] {
  const byKey = new Map<string, HandlerRun[]>();
  for (const run of runs) byKey.set(`${run.memberId}/${run.key}`, [...(byKey.get(`${run.memberId}/${run.key}`) ?? []), run]);
  const found: string[] = [];
  for (const [key, list] of byKey) {
    list.sort((a, b) => a.start - b.start);
    for (let i = 1; i < list.length; i++) if (list[i].start < list[i - 1].end) found.push(`${key}: ${list[i - 1].seq} and ${list[i].seq}`);
  }
  return found;
}

/** The most runs of one shard in flight at once. */
function peakPerShard(runs: HandlerRun[]): number {
  const edges = runs
    .flatMap((r) => [
      { at: r.start, d: 1 },
      { at: r.end, d: -1 },
    ])
    .sort((a, b) => a.at - b.at || a.d - b.d);
  let now = 0;
  let peak = 0;
  for (const edge of edges) peak = Math.max(peak, (now += edge.d));
  return peak;
}

async function produce(streamPrefix: string, messages: { key: string; payload: KeyedPayload }[]) {
  await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(messages);
}

describe('key-ordered lanes', () => {
  it('lanes 4 on one shard: different keys run in parallel (4 at most), one key strictly in order, never two of a key at once', async () => {
    const streamPrefix = uniqueName('lanes');
    const recorder = new HandlerRecorder();
    const member = aMember({ streamPrefix, memberId: 'a', shardCount: 1, lanes: 4, handler: recorder.handler('a', () => pause(5)) });
    await member.start();
    await produce(streamPrefix, keyedMessages(8, 15));
    await pollUntil('120 entries handled', async () => recorder.distinctEntries() === 120);
    expect(recorder.duplicates()).toEqual([]);
    expect(recorder.orderViolations()).toEqual([]);
    expect(keyOverlaps(recorder.runs)).toEqual([]);
    const peak = peakPerShard(recorder.runs);
    expect(peak).toBeGreaterThan(1);
    expect(peak).toBeLessThanOrEqual(4);
    expect(member.stats().runtimeMaxConcurrency).toBe(4); // defaults to lanes
  });

  it("16 lanes retrying at once on one shard: no MaxListenersExceededWarning (each wait listens on the shard's release signal)", async () => {
    // Seen in the 15-minute soak with RSC_CHAOS_MEMBER_LANES=16: Node warned "Possible EventTarget
    // memory leak detected. 11 abort listeners added to [AbortSignal]" in the member processes.
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => void (warning.name === 'MaxListenersExceededWarning' && warnings.push(warning));
    process.on('warning', onWarning);
    try {
      const streamPrefix = uniqueName('lanes-many-retries');
      const recorder = new HandlerRecorder();
      const failed = new Set<string>();
      const member = aMember({
        streamPrefix,
        memberId: 'a',
        shardCount: 1,
        lanes: 16,
        retryBackoffMs: 200,
        handler: recorder.handler('a', (message: StreamMessage<KeyedPayload>) => {
          // Every key's first entry fails once: 16 lanes wait out their backoff at the same time.
          if (message.payload.seq === 1 && !failed.has(message.key!)) {
            failed.add(message.key!);
            throw new Error('first attempt fails');
          }
        }),
      });
      await member.start();
      await produce(streamPrefix, keyedMessages(16, 2));
      await pollUntil('every entry handled', async () => recorder.distinctEntries() === 32);
      expect(failed.size).toBe(16);
      // Warnings are emitted on the next tick.
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings.map((w) => w.message)).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('a failing entry holds the later entries of its key, not those of other keys', async () => {
    const streamPrefix = uniqueName('lanes-retry');
    const recorder = new HandlerRecorder();
    let failures = 0;
    const member = aMember({
      streamPrefix,
      memberId: 'a',
      shardCount: 1,
      lanes: 2,
      retryBackoffMs: 300,
      handler: recorder.handler('a', (message) => {
        if (message.key === 'slow' && message.payload.seq === 1 && failures < 2) {
          failures += 1;
          throw new Error('not yet');
        }
      }),
    });
    await member.start();
    await produce(streamPrefix, [
      { key: 'slow', payload: { seq: 1 } },
      { key: 'slow', payload: { seq: 2 } },
      ...Array.from({ length: 10 }, (_, i) => ({ key: 'fast', payload: { seq: i + 1 } })),
    ]);
    await pollUntil('12 entries handled', async () => recorder.distinctEntries() === 12);
    const order = recorder.runs.map((r) => `${r.key}${r.seq}`);
    // Every 'fast' entry was done while 'slow' 1 waited out its two retries (600 ms of backoff).
    expect(order.indexOf('fast10')).toBeLessThan(order.indexOf('slow1'));
    expect(order.indexOf('slow1')).toBeLessThan(order.indexOf('slow2'));
    expect(recorder.runs.find((r) => r.key === 'slow' && r.seq === 1)!.deliveryCount).toBe(3);
    expect(recorder.orderViolations()).toEqual([]);
  });

  it('entries without a key share one lane: their order holds', async () => {
    const streamPrefix = uniqueName('lanes-nokey');
    const seen: number[] = [];
    let running = 0;
    let peak = 0;
    const member = aMember({
      streamPrefix,
      memberId: 'a',
      shardCount: 1,
      lanes: 4,
      handler: async (message) => {
        peak = Math.max(peak, ++running);
        await pause(2);
        seen.push(message.payload.seq);
        running -= 1;
      },
    });
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
      Array.from({ length: 20 }, (_, i) => ({ payload: { seq: i + 1 }, shardIndex: 0 })),
    );
    await pollUntil('20 entries handled', async () => seen.length === 20);
    expect(seen).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(peak).toBe(1);
  });

  it('a member with lanes frozen mid-run (lease lost): its heir takes over the pending entries first, per-key order holds across the handoff', async () => {
    const streamPrefix = uniqueName('lanes-handoff');
    const proxy = await aProxy();
    const recorder = new HandlerRecorder();
    const common = {
      streamPrefix,
      shardCount: 2,
      lanes: 8,
      sessionTimeoutMs: 800,
      rebalanceTimeoutMs: 2000,
      revocationTimeoutMs: 200,
      shutdownTimeoutMs: 100,
    };
    const doomed = aMember(
      { ...common, memberId: 'doomed', handler: recorder.handler('doomed', () => pause(3)) },
      redis.clientAt(proxy.url),
    );
    await doomed.start();
    await produce(streamPrefix, keyedMessages(16, 40));
    await pollUntil('the doomed member well under way', async () => recorder.runs.length >= 150);
    proxy.freeze(); // its heartbeats, reads and acks stop reaching Redis; handlers in flight finish unacknowledged
    const heir = aMember({ ...common, memberId: 'heir', handler: recorder.handler('heir', () => pause(1)) });
    await heir.start();
    await pollUntil('every entry handled', async () => recorder.distinctEntries() === 640, { timeoutMs: 20_000 });
    expect(recorder.runs.filter((r) => r.memberId === 'heir').length).toBeGreaterThan(0);
    // Both ran lanes side by side (so the handoff is one of lanes, not of one entry at a time).
    for (const who of ['doomed', 'heir'])
      expect(peakPerShard(recorder.runs.filter((r) => r.memberId === who && r.shardIndex === 0)), who).toBeGreaterThan(1);
    // First handlings of each key in sequence order, over both members; redeliveries allowed.
    expect(recorder.orderViolations()).toEqual([]);
    expect(keyOverlaps(recorder.runs)).toEqual([]);
    // The heir ran the doomed member's unacknowledged entries again (deliveryCount 2) before newer ones of the key.
    const heirRuns = recorder.runs.filter((r) => r.memberId === 'heir');
    expect(heirRuns.some((r) => r.deliveryCount > 1)).toBe(true);
    for (const key of new Set(heirRuns.map((r) => r.key))) {
      const runs = heirRuns.filter((r) => r.key === key);
      const firstNew = runs.findIndex((r) => r.deliveryCount === 1);
      if (firstNew >= 0)
        expect(
          runs.slice(firstNew).every((r) => r.deliveryCount === 1),
          key,
        ).toBe(true);
    }
    const { shards } = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
    await pollUntil('nothing pending', async () =>
      (await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group')).shards.every((s) => s.pending === 0 && s.lag === 0),
    );
    expect(shards).toHaveLength(2);
    proxy.thaw();
  }, 30_000);

  it('refuses lanes that are not a positive integer, and lanes with batch', () => {
    const base = { streamPrefix: 'x', consumerGroup: 'g' };
    expect(() => new CoordinatedMember(redis.client(), { ...base, lanes: 0, handler: () => undefined })).toThrow(
      'lanes must be an integer from 1 to 10000, got 0',
    );
    expect(
      () =>
        new CoordinatedMember(redis.client(), {
          ...base,
          lanes: 2,
          batch: { maxSize: 10 },
          handler: (messages: StreamMessage[]) => messages,
        }),
    ).toThrow(/batch and lanes \(2\) cannot be combined/);
  });
});
