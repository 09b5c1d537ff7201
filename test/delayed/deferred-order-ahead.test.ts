import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, StreamProducer, type ParkedEvent, type StreamMessage } from '@redis-stream-coordinator/core';
import type { KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { oneShardStream } from '../support/one-shard-stream';
import { pollUntil } from '../support/poll';
import { useRedisServer } from '../support/vitest-redis';

// Attacks on the parks asked ahead of their turn (member/handle/parks-ahead.ts), each seen failing
// before an entry not decided for good held its key: an entry whose early answer was 'run' is asked
// again at its turn when its key was deferred meanwhile (an entry of another key dispatched in the
// same loop asked ahead about the key's later entries first); an early 'hold' waited 100 ms at its
// turn after its key's release was done; a key's copies with early 'hold' answers were passed over
// when one of them was deferred, and the ones after them parked first.

const redis = useRedisServer();
const aMember = memberFactory(redis, { blockMs: 300 });
const keys = new KeyBuilder();
const wait = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** seq -> how long its handler takes, and whether its first attempt is nacked to be deferred (ms). */
type Plan = Record<number, { takesMs?: number; deferMs?: number }>;

/** A member of manual acks, 4 lanes and one worker whose handler follows `plan`: what it ran and parked. */
function plannedMember(streamPrefix: string, plan: Plan) {
  const seen: { seq: number; key: string | undefined }[] = [];
  const nacked = new Set<number>();
  const handler = async (message: StreamMessage<KeyedPayload>) => {
    const { seq } = message.payload;
    seen.push({ seq, key: message.key });
    const step = plan[seq] ?? {};
    if (step.takesMs) await wait(step.takesMs);
    if (step.deferMs !== undefined && !nacked.has(seq)) {
      nacked.add(seq);
      await message.nack({ defer: true, retryAfterMs: step.deferMs });
      return;
    }
    await message.ack();
  };
  const member = aMember({ streamPrefix, ackMode: 'manual', lanes: 4, runtimeMaxConcurrency: 1, maxAttempts: 5, handler });
  const parked: ParkedEvent[] = [];
  member.on('parked', (event) => parked.push(event));
  return { member, seen, parked };
}

/** Sends (key, seq) entries in one batch: their ids, in order. */
async function sendIds(producer: StreamProducer, entries: [string, number][]): Promise<string[]> {
  return (await producer.sendBatch(entries.map(([key, seq]) => ({ key, payload: { seq } })))).map((r) => r.id);
}

describe('deferredOrder key: parks asked ahead of their turn', () => {
  it("an entry answered 'run' ahead of its turn whose key is deferred before its turn is parked before its key's later entries (lanes, one worker, manual acks)", async () => {
    const streamPrefix = await oneShardStream(redis, 'ahead-rerun');
    const plan: Plan = {
      1: { deferMs: 60_000 }, // q0: key q deferred for the whole test (its later entries park)
      2: { deferMs: 60_000 }, // k0: key k deferred, then dropped by the admin (the member's mirror still counts it)
      10: { takesMs: 400, deferMs: 1_500 }, // Y (key k): runs, deferred
      20: { takesMs: 500 }, // W (key w): holds the only worker while Y's deferral is written
    };
    const { member, seen, parked } = plannedMember(streamPrefix, plan);
    const deferred: number[] = [];
    member.on('deferred', () => deferred.push(1));
    await member.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const admin = new CoordinatorAdmin(redis.client());
    const target = { streamPrefix, shardIndex: 0, consumerGroup: 'group' };

    // Key k's deferral dropped by an operator (rsc schedule drop): Redis counts nothing of k, the
    // member's mirror still counts it (its entries ask Redis, which answers 'run').
    await producer.send({ key: 'k', payload: { seq: 2 } });
    await pollUntil('k0 deferred', async () => deferred.length === 1);
    const [k0] = (await admin.readSchedule(target)).entries;
    expect(await admin.dropScheduled(target, k0.id)).toMatchObject({ dropped: true });
    // Key q deferred for good: its later entries ask Redis (and park).
    await producer.send({ key: 'q', payload: { seq: 1 } });
    await pollUntil('q0 deferred', async () => deferred.length === 2);

    // Y and X of key k: Y asks at its turn, X is asked ahead with it; both answered 'run'.
    const yx = await sendIds(producer, [
      ['k', 10],
      ['k', 11],
    ]);
    await pollUntil('Y running', async () => seen.some((s) => s.seq === 10));
    // While Y runs: W (holds the worker once Y fails), Q (key q: asks Redis at its turn), E (key k, after X).
    const wqe = await sendIds(producer, [
      ['w', 20],
      ['q', 21],
      ['k', 12],
    ]);
    // Y nacked (deferred 1.5 s), W runs 500 ms; then X's turn (re-asked: k is deferred now) and Q's, in one dispatch.
    await pollUntil('k handled: Y twice, X, E', async () => seen.filter((s) => s.key === 'k').length === 5, { timeoutMs: 15_000 });
    // X (written before E) must run before it, so be parked before it.
    expect(seen.filter((s) => s.key === 'k').map((s) => s.seq)).toEqual([2, 10, 10, 11, 12]);
    expect(parked.filter((p) => p.key === 'k').map((p) => p.id)).toEqual([yx[1], wqe[2]]);
  });
  it("with the mirror of key states incomplete (more keys than MIRRORED_KEY_STATES_MAX), an entry asked ahead is parked before its key's later entry only if nothing of its key went first (lanes, one worker, manual acks)", async () => {
    const streamPrefix = await oneShardStream(redis, 'ahead-incomplete');
    // More key states than a member mirrors (4096): keys with nothing deferred and a barrier, as a
    // busy shard's would be. Every entry of a key the mirror does not hold asks Redis at its turn.
    const states = keys.shardDeferredKeys(streamPrefix, 0, 'group');
    const pipeline = redis.client().pipeline();
    for (let i = 0; i < 4200; i++) pipeline.hset(states, `kfiller-${i}`, '0|0|0|||1-1');
    await pipeline.exec();
    const plan: Plan = {
      10: { takesMs: 400, deferMs: 1_500 }, // Y (key k): runs, deferred
      20: { takesMs: 500 }, // W (key w): takes the only worker when Y fails
    };
    const { member, seen, parked } = plannedMember(streamPrefix, plan);
    await member.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const yx = await sendIds(producer, [
      ['k', 10],
      ['k', 11],
    ]);
    await pollUntil('Y running', async () => seen.some((s) => s.seq === 10));
    const we = await sendIds(producer, [
      ['w', 20],
      ['k', 12],
    ]);
    await pollUntil('k handled: Y twice, X, E', async () => seen.filter((s) => s.key === 'k').length === 4, { timeoutMs: 15_000 });
    expect(seen.filter((s) => s.key === 'k').map((s) => s.seq)).toEqual([10, 10, 11, 12]);
    expect(parked.filter((p) => p.key === 'k').map((p) => p.id)).toEqual([yx[1], we[1]]);
  });
});

describe('deferredOrder key: holds asked ahead of their turn', () => {
  it("a key released in part (1,500 entries due, 1,024 released per turn) runs its copies at once once its release is done: no copy waits 100 ms for an early 'hold'", async () => {
    const streamPrefix = await oneShardStream(redis, 'hold-ahead');
    const seen: { seq: number; at: number }[] = [];
    let failedOnce = false;
    const handler = async (message: StreamMessage<KeyedPayload>) => {
      seen.push({ seq: message.payload.seq, at: Date.now() });
      if (message.payload.seq === 0 && !failedOnce) {
        failedOnce = true;
        throw new Error('fails once');
      }
    };
    const member = aMember({ streamPrefix, retryMode: 'deferred', maxAttempts: 3, retryBackoffMs: 2_000, handler });
    const parked: ParkedEvent[] = [];
    member.on('parked', (event) => parked.push(event));
    await member.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ key: 'k', payload: { seq: 0 } });
    await pollUntil('k0 ran', async () => seen.length === 1);
    const count = 1_500;
    for (let from = 1; from <= count; from += 100)
      await producer.sendBatch(Array.from({ length: 100 }, (_, i) => ({ key: 'k', payload: { seq: from + i } })));
    await pollUntil('all parked behind k0', async () => parked.length === count, { timeoutMs: 20_000 });
    await pollUntil('all handled', async () => seen.length === count + 2, { timeoutMs: 120_000, intervalMs: 50 });
    const retry = seen[1].at;
    const took = seen[seen.length - 1].at - retry;
    expect(seen.map((s) => s.seq)).toEqual([0, 0, ...Array.from({ length: count }, (_, i) => i + 1)]);
    // From k0's retry to the last copy: a few read turns (main: about 0.2 s).
    // Copies that waited about HOLD_RECHECK_MS (100 ms) after the one before them.
    const waited = seen.slice(2).filter((s, i) => s.at - seen[i + 1].at >= 90).length;
    expect({ took: took < 5_000, waited }).toEqual({ took: true, waited: 0 });
  }, 150_000);
});

describe('deferredOrder key: holds asked ahead of their turn, lanes', () => {
  for (const { lanes, traffic: withTraffic } of [
    { lanes: 1, traffic: false },
    { lanes: 2, traffic: true },
  ])
    it(`a key's copies keep their order when one of them is deferred while the next waits on an early 'hold' (lanes ${lanes}${withTraffic ? ', traffic on another deferred key' : ', no other traffic'})`, async () => {
      const streamPrefix = await oneShardStream(redis, `hold-ahead-order-${lanes}`);
      const seen: { seq: number; key: string | undefined }[] = [];
      const failed = new Set<number>();
      // seq 0 (key k) fails once: k's later entries park behind it; seq 50 (one of its copies) fails once
      // when released; seq 100000 (key z) fails once: z's entries ask Redis at their turn.
      const failsOnce = new Set([0, 50, 100_000]);
      const handler = async (message: StreamMessage<KeyedPayload>) => {
        const { seq } = message.payload;
        seen.push({ seq, key: message.key });
        if (failsOnce.has(seq) && !failed.has(seq)) {
          failed.add(seq);
          throw new Error(`fails ${seq}`);
        }
      };
      const member = aMember({ streamPrefix, retryMode: 'deferred', maxAttempts: 3, retryBackoffMs: 2_000, lanes, handler });
      const parked: ParkedEvent[] = [];
      member.on('parked', (event) => parked.push(event));
      await member.start();
      const producer = new StreamProducer(redis.client(), { streamPrefix });
      await producer.send({ key: 'k', payload: { seq: 0 } });
      await producer.send({ key: 'z', payload: { seq: 100_000 } });
      await pollUntil('k0 and z0 ran', async () => seen.length === 2);
      const count = 1_500;
      for (let from = 1; from <= count; from += 100)
        await producer.sendBatch(Array.from({ length: 100 }, (_, i) => ({ key: 'k', payload: { seq: from + i } })));
      await pollUntil('all parked behind k0', async () => parked.length === count, { timeoutMs: 20_000 });
      // Traffic on key z (deferred: each of its entries asks Redis at its turn) while k is released.
      let z = 100_001;
      const traffic = withTraffic
        ? setInterval(() => void producer.send({ key: 'z', payload: { seq: z++ } }).catch(() => undefined), 20)
        : undefined;
      try {
        await pollUntil('k handled', async () => seen.filter((s) => s.key === 'k').length === count + 3, {
          timeoutMs: 90_000,
          intervalMs: 50,
        });
      } finally {
        clearInterval(traffic);
      }
      const k = seen.filter((s) => s.key === 'k').map((s) => s.seq);
      const expected = [0, 0, ...Array.from({ length: 50 }, (_, i) => i + 1), 50, ...Array.from({ length: count - 50 }, (_, i) => i + 51)];
      const firstOutOfOrder = k.findIndex((seq, i) => seq !== expected[i]);
      // The seqs around the first one out of order, if any.
      expect(firstOutOfOrder === -1 ? 'in order' : k.slice(Math.max(0, firstOutOfOrder - 3), firstOutOfOrder + 5)).toBe('in order');
    }, 150_000);
});
