import { describe, expect, it } from 'vitest';
import {
  CoordinatedMember,
  CoordinatorAdmin,
  KeyBuilder,
  ShardError,
  StreamProducer,
  type StreamMessage,
} from '@redis-stream-coordinator/core';
import { HandlerRecorder, type KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const aMember = memberFactory(redis, { retryBackoffMs: 1 });
const aProxy = proxyFactory(redis);

/** The raw fields of shard 0's dead letters, as stored. */
async function deadLetters(streamPrefix: string) {
  const entries = await redis.client().xrange(new KeyBuilder().shardDeadLetterStream(streamPrefix, 0, 'group'), '-', '+');
  return entries.map(([, fields]) =>
    Object.fromEntries(Array.from({ length: fields.length / 2 }, (_, i) => [fields[2 * i], fields[2 * i + 1]])),
  );
}

async function settledShard(streamPrefix: string, shardIndex: number) {
  return pollUntil(`shard ${shardIndex} fully acknowledged`, async () => {
    const { shards } = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
    const shard = shards[shardIndex];
    return shard.pending === 0 && shard.lag === 0 && shard;
  });
}

describe('retries and dead letters', () => {
  it('retries in place with the delivery count visible, and keeps the shard order', async () => {
    const streamPrefix = uniqueName('retry');
    const seen: { seq: number; deliveryCount: number }[] = [];
    let failuresLeft = 2;
    const member = aMember({
      streamPrefix,
      shardCount: 1,
      maxAttempts: 3,
      handler: (message: StreamMessage<KeyedPayload>) => {
        seen.push({ seq: message.payload.seq, deliveryCount: message.deliveryCount });
        if (message.payload.seq === 1 && failuresLeft-- > 0) throw new Error('flaky');
      },
    });
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch([1, 2, 3].map((seq) => ({ key: 'k', payload: { seq } })));
    await settledShard(streamPrefix, 0);
    expect(seen).toEqual([
      { seq: 1, deliveryCount: 1 },
      { seq: 1, deliveryCount: 2 },
      { seq: 1, deliveryCount: 3 },
      { seq: 2, deliveryCount: 1 },
      { seq: 3, deliveryCount: 1 },
    ]);
    expect(await deadLetters(streamPrefix)).toEqual([]);
  });

  it('after maxAttempts the entry, its error and attempt count go to the dead-letter stream and it is acknowledged', async () => {
    const streamPrefix = uniqueName('poison');
    const handled: number[] = [];
    const member = aMember({
      streamPrefix,
      shardCount: 1,
      maxAttempts: 4,
      handler: (message: StreamMessage<KeyedPayload>) => {
        if (message.payload.seq === 2) throw new TypeError('cannot handle 2');
        handled.push(message.payload.seq);
      },
    });
    const letters: unknown[] = [];
    member.on('dead-letter', (event) => letters.push(event));
    await member.start();
    const [, poison] = await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
      [1, 2, 3].map((seq) => ({ key: 'k', payload: { seq } })),
    );
    await settledShard(streamPrefix, 0);
    expect(handled).toEqual([1, 3]);
    const [letter] = await deadLetters(streamPrefix);
    expect(letter).toMatchObject({
      shardIndex: '0',
      entryId: poison.id,
      error: 'TypeError: cannot handle 2',
      attempts: '4',
      memberId: member.memberId,
    });
    expect(JSON.parse(letter.fields)).toEqual(['p', '{"seq":2}', 'c', 'json', 'k', 'k']);
    expect(letters).toHaveLength(1);
  });

  it('entries that cannot be decoded, or were not written by a producer, go to the dead-letter stream at once', async () => {
    const streamPrefix = uniqueName('garbage');
    const handled: number[] = [];
    const member = aMember({ streamPrefix, shardCount: 1, handler: (m: StreamMessage<KeyedPayload>) => void handled.push(m.payload.seq) });
    await member.start();
    const stream = new KeyBuilder().shardStream(streamPrefix, 0);
    const client = redis.client();
    await client.xadd(stream, '*', 'p', '{not json');
    await client.xadd(stream, '*', 'something', 'else');
    await client.xadd(stream, '*', 'p', '{"seq":1}', 'h', '[1,2]');
    await client.xadd(stream, '*', 'p', Buffer.from([0xff, 0xfe, 0x00]));
    await client.xadd(stream, '*', 'blob', Buffer.alloc(4 * 1024 * 1024, 0xab)); // huge, binary, foreign
    await client.xadd(stream, '*', 'p', '{"seq":7}');
    await settledShard(streamPrefix, 0);
    expect(handled).toEqual([7]);
    const letters = await deadLetters(streamPrefix);
    expect(letters.map((l) => [l.attempts, l.error.replace(/: .*$/s, '')])).toEqual([
      ['0', 'the payload cannot be decoded by codec "json"'],
      ['0', 'the entry has no "p" field'],
      ['0', 'the headers cannot be decoded'],
      ['0', 'the payload cannot be decoded by codec "json"'],
      ['0', 'the entry has no "p" field'],
    ]);
  });
});

describe('fairness', () => {
  it('1 worker, 16 shards with a backlog each: every shard progresses, the most served within 2x of the least', async () => {
    const streamPrefix = uniqueName('fair');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 16 });
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    for (let shardIndex = 0; shardIndex < 16; shardIndex++) {
      await producer.sendBatch(Array.from({ length: 300 }, (_, seq) => ({ shardIndex, payload: { seq } })));
    }
    const recorder = new HandlerRecorder();
    const member = aMember({
      streamPrefix,
      runtimeMaxConcurrency: 1,
      batchSize: 20,
      maxBufferedEntries: 100,
      handler: recorder.handler('solo'),
    });
    await member.start();
    await pollUntil('a window of 1,600 entries', async () => recorder.runs.length >= 1600, { timeoutMs: 30_000 });
    const window = recorder.runs.slice(0, 1600);
    const perShard = Array.from({ length: 16 }, (_, shard) => window.filter((r) => r.shardIndex === shard).length);
    expect(Math.min(...perShard)).toBeGreaterThan(0);
    expect(Math.max(...perShard)).toBeLessThanOrEqual(2 * Math.min(...perShard));
  });
});

describe('a zombie', () => {
  it('paused past its session timeout, then resumed, cannot acknowledge entries of a shard that moved; the new owner processes them', async () => {
    const streamPrefix = uniqueName('zombie');
    const proxy = await aProxy();
    let releaseZombie: () => void = () => undefined;
    const zombieHolds = new Promise<void>((resolve) => (releaseZombie = resolve));
    const zombieHandled: string[] = [];
    let zombieStarted = false;
    const zombie = aMember(
      {
        streamPrefix,
        memberId: 'zombie',
        shardCount: 1,
        sessionTimeoutMs: 600,
        shutdownTimeoutMs: 100,
        handler: async (message: StreamMessage<KeyedPayload>) => {
          zombieStarted = true;
          await zombieHolds; // "paused" in the middle of its work
          zombieHandled.push(message.id);
        },
      },
      redis.clientAt(proxy.url),
    );
    const zombieErrors: Error[] = [];
    zombie.on('error', (error) => zombieErrors.push(error));
    const leaseLost: unknown[] = [];
    zombie.on('lease-lost', (event) => leaseLost.push(event));
    await zombie.start();
    const [entry] = await new StreamProducer(redis.client(), { streamPrefix }).sendBatch([{ key: 'k', payload: { seq: 1 } }]);
    await pollUntil('the zombie to be in its handler', async () => zombieStarted);

    proxy.freeze(); // the zombie's heartbeats and acks stop reaching Redis
    const recorder = new HandlerRecorder();
    const heir = aMember({ streamPrefix, memberId: 'heir', sessionTimeoutMs: 5000, handler: recorder.handler('heir') });
    await heir.start();
    await pollUntil('the heir to process the entry', async () => recorder.runs.some((r) => r.id === entry.id), { timeoutMs: 15_000 });
    expect(recorder.runs[0]).toMatchObject({ id: entry.id, deliveryCount: 2 });
    // the zombie noticed it could not heartbeat and fenced itself (while still "paused" in its handler)
    await pollUntil('the zombie to give up its lease', async () => leaseLost.length > 0);
    expect(leaseLost[0]).toMatchObject({ shards: [0] });

    releaseZombie();
    proxy.thaw();
    await pollUntil('the zombie to try to acknowledge', async () => zombieHandled.length === 1);
    await pollUntil('its acknowledgement to be refused', async () =>
      zombieErrors.some((e) => e instanceof ShardError && /acknowledgement\(s\) refused, the shard has a new owner/.test(e.message)),
    );
    await settledShard(streamPrefix, 0);
    const { members } = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
    expect(members.find((m) => m.memberId === 'heir')!.currentAssignment).toEqual([{ shardIndex: 0 }]);
  });
});

describe('late reads by another consumer', () => {
  /** An owner of a one-shard stream that has handled seq 1 (and so is in its next blocking read). */
  async function anOwner(label: string, sweepIntervalMs: number, work?: () => Promise<unknown>) {
    const streamPrefix = uniqueName(label);
    const recorder = new HandlerRecorder();
    const owner = aMember({
      streamPrefix,
      memberId: 'owner',
      shardCount: 1,
      sweepIntervalMs,
      handler: recorder.handler('owner', work && (async () => void (await work()))),
    });
    const errors: string[] = [];
    owner.on('error', (error) => errors.push(error.message));
    await owner.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ key: 'k', payload: { seq: 1 } });
    await pollUntil('the owner reading', async () => recorder.runs.length === 1);
    return { streamPrefix, recorder, owner, errors, producer };
  }

  /**
   * A read by another consumer of the group that reaches Redis late (as after a healed partition):
   * in one transaction with the entries it takes (seq 2, 3, 4), so Redis serves it before the
   * owner's blocked read.
   */
  async function lateRead(streamPrefix: string) {
    const stream = new KeyBuilder().shardStream(streamPrefix, 0);
    const late = redis.client().multi();
    for (const seq of [2, 3, 4]) late.xadd(stream, '*', 'p', JSON.stringify({ seq }), 'k', 'k');
    late.xreadgroup('GROUP', 'group', 'zombie', 'COUNT', 10, 'STREAMS', stream, '>');
    await late.exec();
  }

  it('entries a zombie read after the shard moved are handled before the newer ones the owner reads next', async () => {
    const { streamPrefix, recorder, errors, producer } = await anOwner('late-read', 60_000);
    await lateRead(streamPrefix);
    await producer.sendBatch([5, 6].map((seq) => ({ key: 'k', payload: { seq } })));

    await pollUntil('all six handled', async () => recorder.distinctEntries() === 6);
    expect(recorder.runs.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(recorder.runs.slice(1, 4).map((r) => r.deliveryCount)).toEqual([2, 2, 2]);
    expect(errors.some((e) => /3 entries before .* were delivered elsewhere \(a late read\)/.test(e))).toBe(true);
    await settledShard(streamPrefix, 0);
  });

  it('entries a sweep already took over are not taken again when a later batch is checked', async () => {
    const slowly = () => new Promise((resolve) => setTimeout(resolve, 100));
    const { streamPrefix, recorder, owner, producer } = await anOwner('swept', 20, slowly);
    await lateRead(streamPrefix);
    // The sweep takes 2, 3, 4 over; while they are still queued here, newer entries arrive.
    await pollUntil('the sweep to take them over', async () => owner.stats().bufferedEntries + owner.stats().activeHandlers >= 2);
    await producer.sendBatch([5, 6].map((seq) => ({ key: 'k', payload: { seq } })));
    await pollUntil('all six handled', async () => recorder.distinctEntries() === 6);
    await settledShard(streamPrefix, 0);
    expect(recorder.duplicates()).toEqual([]);
    expect(recorder.runs.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5, 6]);
  });
});

describe('bad options fail at construction, naming the option', () => {
  const base = { streamPrefix: 's', consumerGroup: 'g', handler: () => undefined };
  it.each([
    [{ runtimeMaxConcurrency: 0 }, /runtimeMaxConcurrency must be an integer from 1 to 10000, got 0/],
    [{ runtimeMaxConcurrency: 2.5 }, /runtimeMaxConcurrency must be an integer/],
    [{ maxAttempts: 0 }, /maxAttempts must be an integer from 1/],
    [{ sessionTimeoutMs: 5 }, /sessionTimeoutMs must be an integer from 100/],
    [{ batchSize: -1 }, /batchSize/],
    [{ streamPrefix: 'has space' }, /streamPrefix "has space" is invalid/],
    [{ consumerGroup: '' }, /consumerGroup "" is invalid/],
    [{ handler: undefined }, /handler must be a function, got undefined/],
    [{ memberId: 'a{b}' }, /memberId "a\{b\}" is invalid/],
    [{ memberName: 'line\nbreak' }, /memberName must be 1-256 printable characters/],
    [{ codec: { name: 'x' } }, /codec must have a name and encode\(payload\) and decode\(raw\) functions/],
    [{ resetStuckConnection: 'yes' }, /resetStuckConnection must be a boolean, got "yes"/],
  ])('%o', (override, message) => {
    expect(() => new CoordinatedMember(redis.client(), { ...base, ...override } as never)).toThrow(message);
  });
});
