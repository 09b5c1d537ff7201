import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, type DeferredEvent, KeyBuilder, StreamProducer, type StreamMessage } from '@redis-stream-coordinator/core';
import { runScript } from '../../packages/core/src/redis/scripts';
import { packFields } from '../../packages/core/src/redis/packed-fields';
import { ShardClient } from '../../packages/core/src/redis/shard-client';
import type { KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { oneShardStream } from '../support/one-shard-stream';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// docs/runtime.md, Deferred retries: a failed entry acknowledged and put in the group's durable
// schedule in one fenced step, its attempts counted on, the shard going on with its other entries.

const redis = useRedisServer();
const aMember = memberFactory(redis, { blockMs: 300 });
const keys = new KeyBuilder();

const aStream = (label: string) => oneShardStream(redis, label);

/** Every handler call, in order: payload seq, key and delivery count. */
function recorder(fails: (message: StreamMessage<KeyedPayload>) => boolean = () => false) {
  const seen: { seq: number; key: string | undefined; deliveryCount: number }[] = [];
  return {
    seen,
    handler: (message: StreamMessage<KeyedPayload>) => {
      seen.push({ seq: message.payload.seq, key: message.key, deliveryCount: message.deliveryCount });
      if (fails(message)) throw new Error(`fails ${message.payload.seq}`);
    },
  };
}

async function deadLetters(streamPrefix: string, group = 'group') {
  const entries = await redis.client().xrange(keys.shardDeadLetterStream(streamPrefix, 0, group), '-', '+');
  return entries.map(([, fields]) =>
    Object.fromEntries(Array.from({ length: fields.length / 2 }, (_, i) => [fields[2 * i], fields[2 * i + 1]])),
  );
}

async function pendingCount(streamPrefix: string, group = 'group'): Promise<number> {
  const summary = (await redis.client().xpending(keys.shardStream(streamPrefix, 0), group)) as [number, ...unknown[]];
  return Number(summary[0]);
}

/** A member whose handler holds the one entry sent until `release`: the entry stays pending at its owner. */
async function oneEntryHeld(streamPrefix: string): Promise<{ id: string; release: () => void }> {
  let release!: () => void;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  await aMember({ streamPrefix, handler: () => held }).start();
  const { id } = await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 1 } });
  await pollUntil('the entry pending at the owner', async () => (await pendingCount(streamPrefix)) === 1);
  return { id, release };
}

describe('deferred retries', () => {
  it("a failing key under retryMode 'deferred' does not stop the other keys of its shard (one worker); another group never runs the retry", async () => {
    const streamPrefix = await aStream('deferred-others');
    const group = recorder((m) => m.key === 'bad' && m.deliveryCount === 1);
    const other = recorder();
    const member = aMember({
      streamPrefix,
      runtimeMaxConcurrency: 1,
      retryMode: 'deferred',
      maxAttempts: 2,
      retryBackoffMs: 2000,
      handler: group.handler,
    });
    const deferred: DeferredEvent[] = [];
    member.on('deferred', (event) => deferred.push(event));
    await member.start();
    await aMember({ streamPrefix, consumerGroup: 'other', handler: other.handler }).start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch([
      { key: 'bad', payload: { seq: 0 } },
      ...[1, 2, 3, 4, 5].map((seq) => ({ key: `good-${seq}`, payload: { seq } })),
    ]);
    await pollUntil('the other keys handled', async () => group.seen.filter((s) => s.key !== 'bad').length === 5);
    // The failed entry is acknowledged and waits in the group's schedule, not in the shard.
    expect(group.seen.filter((s) => s.key === 'bad')).toEqual([{ seq: 0, key: 'bad', deliveryCount: 1 }]);
    expect(await redis.client().zcard(keys.shardDeferred(streamPrefix, 0, 'group'))).toBe(1);
    const admin = new CoordinatorAdmin(redis.client());
    expect((await admin.describeGroup(streamPrefix, 'group')).shards[0]).toMatchObject({ deferred: 1, scheduled: 0 });
    expect((await admin.describeGroup(streamPrefix, 'other')).shards[0]).toMatchObject({ deferred: 0 }); // the group's own
    expect(deferred).toEqual([expect.objectContaining({ shardIndex: 0, attempts: 1, reason: 'Error: fails 0' })]);
    await pollUntil('the deferred retry handled', async () => group.seen.length === 7, { timeoutMs: 15_000 });
    expect(group.seen.map((s) => s.seq)).toEqual([0, 1, 2, 3, 4, 5, 0]);
    expect(group.seen[6]).toEqual({ seq: 0, key: 'bad', deliveryCount: 2 });
    await pollUntil('everything acknowledged', async () => (await pendingCount(streamPrefix)) === 0);
    expect(await deadLetters(streamPrefix)).toEqual([]);
    // The other group handled the original once; the released retry (the group's own) it acknowledged unhandled.
    await pollUntil(
      'the other group acknowledged all',
      async () => (await pendingCount(streamPrefix, 'other')) === 0 && other.seen.length >= 6,
    );
    expect(other.seen.map((s) => s.seq).sort()).toEqual([0, 1, 2, 3, 4, 5]);
    expect(await redis.client().xlen(keys.shardStream(streamPrefix, 0))).toBe(7);
  });

  it('its attempts count on across a handoff, and after maxAttempts it is dead-lettered with them', async () => {
    const streamPrefix = await aStream('deferred-handoff');
    const first = recorder(() => true);
    const second = recorder(() => true);
    // The backoff outlasts b's start and a's stop: had it run out before, a would release the copy and
    // read it before it stopped (a delivery it never ran, which b's XPENDING count then includes: an
    // attempt counted that no handler made, seen as [3, 3] under load).
    const options = { streamPrefix, retryMode: 'deferred' as const, maxAttempts: 3, retryBackoffMs: 3_000, retryBackoffMaxMs: 3_000 };
    const a = aMember({ ...options, handler: first.handler });
    await a.start();
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 1 } });
    await pollUntil(
      'deferred once by the first member',
      async () => (await redis.client().zcard(keys.shardDeferred(streamPrefix, 0, 'group'))) === 1,
    );
    const b = aMember({ ...options, handler: second.handler });
    await b.start();
    await a.stop(); // the shard goes to b
    await pollUntil('dead-lettered by the second member', async () => (await deadLetters(streamPrefix)).length === 1, {
      timeoutMs: 25_000,
    });
    expect(first.seen.map((s) => s.deliveryCount)).toEqual([1]);
    expect(second.seen.map((s) => s.deliveryCount)).toEqual([2, 3]);
    expect(await deadLetters(streamPrefix)).toEqual([expect.objectContaining({ cause: 'attempts-exhausted', attempts: '3' })]);
    expect(await redis.client().zcard(keys.shardDeferred(streamPrefix, 0, 'group'))).toBe(0);
  });

  it("ackMode 'manual', deferredOrder 'none': nack({ retryAfterMs, defer: true }) defers that entry alone; the shard goes on", async () => {
    const streamPrefix = await aStream('deferred-nack');
    const seen: { seq: number; deliveryCount: number }[] = [];
    const member = aMember({
      streamPrefix,
      ackMode: 'manual',
      deferredOrder: 'none',
      handler: async (message: StreamMessage<KeyedPayload>) => {
        seen.push({ seq: message.payload.seq, deliveryCount: message.deliveryCount });
        if (message.payload.seq === 1 && message.deliveryCount === 1) await message.nack({ retryAfterMs: 700, defer: true });
        else await message.ack();
      },
    });
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch([1, 2, 3].map((seq) => ({ key: 'same-key', payload: { seq } })));
    await pollUntil('all handled', async () => seen.length === 4, { timeoutMs: 15_000 });
    // Not in place, and 'none': the key's later entries did not wait for the deferred one (docs/runtime.md).
    expect(seen).toEqual([
      { seq: 1, deliveryCount: 1 },
      { seq: 2, deliveryCount: 1 },
      { seq: 3, deliveryCount: 1 },
      { seq: 1, deliveryCount: 2 },
    ]);
  });

  it('a zombie cannot defer: its token is refused, nothing is scheduled and the entry stays pending for the owner', async () => {
    const streamPrefix = await aStream('deferred-zombie');
    const { id, release } = await oneEntryHeld(streamPrefix);
    const zombie = new ShardClient(redis.client(), keys, streamPrefix, 'group', 'zombie-member');
    expect(await zombie.defer(0, 1, { id, fields: ['p', '{"seq":1}', 'k', 'k'] }, 1, 1000)).toBeNull();
    expect(await redis.client().zcard(keys.shardDeferred(streamPrefix, 0, 'group'))).toBe(0);
    expect(await pendingCount(streamPrefix)).toBe(1);
    release();
    await pollUntil('the owner acknowledged it', async () => (await pendingCount(streamPrefix)) === 0);
  });

  it('an entry written by other code with 10,000 more fields is deferred with the fields a member reads only, and comes back (SPEC 10.7)', async () => {
    const streamPrefix = await aStream('deferred-wide');
    const group = recorder((m) => m.deliveryCount === 1);
    await aMember({ streamPrefix, retryMode: 'deferred', retryBackoffMs: 100, handler: group.handler }).start();
    await pollUntil('the shard claimed', async () => (await redis.client().exists(keys.shardFence(streamPrefix, 0, 'group'))) === 1);
    const junk = Array.from({ length: 10_000 }, (_, i) => [`x${i}`, 'y']).flat();
    await redis.client().xadd(keys.shardStream(streamPrefix, 0), '*', 'p', '{"seq":1}', 'k', 'wide', ...junk);
    // Released with all its fields, the release's unpack would fail ("too many results to unpack") on every turn.
    await pollUntil('handled again after its deferral', async () => group.seen.length === 2, { timeoutMs: 15_000 });
    expect(group.seen.map((s) => s.deliveryCount)).toEqual([1, 2]);
    const [[, fields]] = await redis.client().xrevrange(keys.shardStream(streamPrefix, 0), '+', '-', 'COUNT', 1);
    expect(fields).toEqual(['p', '{"seq":1}', 'k', 'wide', 'g', 'group', 'a', '1']);
  });

  it('an entry written by other code repeating the fields a member reads thousands of times is deferred with each once, as read, and comes back (SPEC 10.7)', async () => {
    const streamPrefix = await aStream('deferred-repeated');
    const group = recorder((m) => m.deliveryCount === 1);
    await aMember({ streamPrefix, retryMode: 'deferred', retryBackoffMs: 100, handler: group.handler }).start();
    await pollUntil('the shard claimed', async () => (await redis.client().exists(keys.shardFence(streamPrefix, 0, 'group'))) === 1);
    // A reader takes the last of a repeated field (decodeEntry): seq 3000 and key 'k2999' are what the handler sees.
    const repeated = Array.from({ length: 3000 }, (_, i) => ['p', `{"seq":${i + 1}}`, 'k', `k${i}`]).flat();
    await redis.client().xadd(keys.shardStream(streamPrefix, 0), '*', ...repeated);
    // Kept with every repetition, the release's unpack would fail ("too many results to unpack") on every turn.
    await pollUntil('handled again after its deferral', async () => group.seen.length === 2, { timeoutMs: 15_000 });
    expect(group.seen).toEqual([
      { seq: 3000, key: 'k2999', deliveryCount: 1 },
      { seq: 3000, key: 'k2999', deliveryCount: 2 },
    ]);
    const [[, fields]] = await redis.client().xrevrange(keys.shardStream(streamPrefix, 0), '+', '-', 'COUNT', 1);
    expect(fields).toEqual(['p', '{"seq":3000}', 'k', 'k2999', 'g', 'group', 'a', '1']);
  });

  it("packFields packs an entry's fields byte for byte as Redis' cmsgpack.pack does, which unpacks them as they were", async () => {
    const lengths = [0, 1, 31, 32, 255, 256, 65_535, 65_536];
    const fields = lengths.map((n, i) => (i % 2 ? Buffer.alloc(n, i) : `${'é'.repeat(Math.floor(n / 2))}${'x'.repeat(n % 2)}`));
    for (const list of [fields, Array.from({ length: 20 }, (_, i) => `v${i}`)]) {
      const packed = packFields(list);
      const repacked = (await redis.client().callBuffer('EVAL', 'return cmsgpack.pack(cmsgpack.unpack(ARGV[1]))', 0, packed)) as Buffer;
      expect(Buffer.compare(repacked, packed)).toBe(0);
      const unpacked = (await redis.client().callBuffer('EVAL', 'return cmsgpack.unpack(ARGV[1])', 0, packed)) as Buffer[];
      expect(unpacked.map((b) => b.toString('hex'))).toEqual(list.map((v) => Buffer.from(v).toString('hex')));
    }
  });

  it('deferFenced-5.lua refuses more field values than an entry and its deferral have (12), and schedules and acknowledges nothing', async () => {
    const streamPrefix = await aStream('deferred-refused');
    const { id, release } = await oneEntryHeld(streamPrefix);
    // The owner's own token: only the count of values refuses the call.
    const token = String(await redis.client().get(keys.shardFence(streamPrefix, 0, 'group')));
    const fields = Array.from({ length: 7 }, (_, i) => [`f${i}`, 'v']).flat(); // 14 values, packed as the member packs them
    const deferred = keys.shardDeferred(streamPrefix, 0, 'group');
    const call = runScript(
      redis.client(),
      'deferFenced',
      [
        keys.shardStream(streamPrefix, 0),
        keys.shardFence(streamPrefix, 0, 'group'),
        deferred,
        keys.shardDeferredEntries(streamPrefix, 0, 'group'),
        keys.shardDeferredKeys(streamPrefix, 0, 'group'),
      ],
      ['group', token, id, 1000, 'kk', packFields(fields)],
    ).catch((error: Error) => error);
    try {
      expect(String(await call)).toMatch(/at most 12 field values, packed, got 14/);
      expect(await redis.client().zcard(deferred)).toBe(0);
      expect(await pendingCount(streamPrefix)).toBe(1);
    } finally {
      release();
    }
    await pollUntil('the owner acknowledged it', async () => (await pendingCount(streamPrefix)) === 0);
  });

  it("an entry written by other code with a field `g` naming another group, but no attempt count `a`, is not taken for that group's deferral: it is handled", async () => {
    const streamPrefix = await aStream('deferred-foreign-g');
    const group = recorder();
    await aMember({ streamPrefix, handler: group.handler }).start();
    await pollUntil('the shard claimed', async () => (await redis.client().exists(keys.shardFence(streamPrefix, 0, 'group'))) === 1);
    const stream = keys.shardStream(streamPrefix, 0);
    await redis.client().xadd(stream, '*', 'p', '{"seq":1}', 'k', 'a', 'g', 'some-other-group');
    await redis.client().xadd(stream, '*', 'p', '{"seq":2}', 'k', 'a', 'g', 'some-other-group', 'a', 'x');
    // A real deferral of another group (both fields, a positive count) is still acknowledged unhandled.
    await redis.client().xadd(stream, '*', 'p', '{"seq":3}', 'k', 'a', 'g', 'some-other-group', 'a', '2');
    // Another group's parked copies that never ran: as this version writes them, and as the one before did.
    await redis.client().xadd(stream, '*', 'p', '{"seq":5}', 'k', 'a', 'g', 'some-other-group', 'a', '1', 'q', '2');
    await redis.client().xadd(stream, '*', 'p', '{"seq":6}', 'k', 'a', 'g', 'some-other-group', 'a', '0', 'q', '1');
    // `a` 0 without that `q` is no deferral.
    await redis.client().xadd(stream, '*', 'p', '{"seq":7}', 'k', 'a', 'g', 'some-other-group', 'a', '0');
    await redis.client().xadd(stream, '*', 'p', '{"seq":4}', 'k', 'a');
    await pollUntil('the last one handled', async () => group.seen.some((s) => s.seq === 4));
    await pollUntil('everything acknowledged', async () => (await pendingCount(streamPrefix)) === 0);
    expect(group.seen.map((s) => s.seq)).toEqual([1, 2, 7, 4]);
  });

  it("retryMode is 'in-place' or 'deferred', and not with batch", async () => {
    const streamPrefix = uniqueName('deferred-options');
    expect(() => aMember({ streamPrefix, retryMode: 'later' as never, handler: () => undefined })).toThrow(
      `retryMode must be 'in-place' or 'deferred', got "later"`,
    );
    expect(() =>
      aMember({ streamPrefix, retryMode: 'deferred', batch: { maxSize: 10 }, handler: (() => undefined) as never } as never),
    ).toThrow("batch and retryMode 'deferred' cannot be combined");
  });
});
