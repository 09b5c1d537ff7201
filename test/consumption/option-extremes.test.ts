import { afterEach, describe, expect, it } from 'vitest';
import {
  type BatchMemberOptions,
  CoordinatedMember,
  type CoordinatedMemberOptions,
  CoordinatorAdmin,
  KeyBuilder,
  MAX_SHARD_COUNT,
  type StreamMessage,
  StreamProducer,
} from '@redis-stream-coordinator/core';
import { MAX_BATCH_SIZE, MAX_LANES } from '../../packages/core/src/member/consumption-options';
import { MAX_RUNTIME_CONCURRENCY } from '../../packages/core/src/member/member-options';
import type { KeyedPayload } from '../support/handler-recorder';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// SPEC 10.7: every numeric option works at its documented extremes. Each test takes its bound from
// the constant the option's validation uses, so a change of the range moves the test with it.
const redis = useRedisServer();
const keys = new KeyBuilder();

const started: CoordinatedMember<KeyedPayload>[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((m) => m.stop().catch(() => undefined)));
});

type Options = Omit<CoordinatedMemberOptions<KeyedPayload>, 'consumerGroup'> | Omit<BatchMemberOptions<KeyedPayload>, 'consumerGroup'>;

/** A started member of group "group"; `errors` collects what it reported (messages and causes). */
async function aMember(options: Options) {
  const member = new CoordinatedMember<KeyedPayload>(redis.client(), {
    consumerGroup: 'group',
    coordinator: { heartbeatIntervalMs: 200 },
    ...options,
  } as BatchMemberOptions<KeyedPayload>);
  const errors = new Set<string>();
  member.on('error', (error) => errors.add(`${error.message} (${(error.cause as Error | undefined)?.message})`));
  started.push(member);
  await member.start();
  return { member, errors };
}

const entries = (count: number, shardIndex = 0) =>
  Array.from({ length: count }, (_, i) => ({ key: `k${i % 7}`, payload: { seq: i + 1 }, shardIndex }));

/** Every shard read to its end and nothing pending; on timeout, says what the member reported. */
async function nothingPendingOrUnread(streamPrefix: string, errors: Set<string>, timeoutMs = 20_000) {
  const admin = new CoordinatorAdmin(redis.client());
  await pollUntil(
    'nothing pending or unread',
    async () => (await admin.describeGroup(streamPrefix, 'group')).shards.every((s) => s.pending === 0 && s.lag === 0),
    { timeoutMs },
  ).catch((error: Error) => {
    throw new Error(`${error.message}; the member reported: ${[...errors].join('; ')}`);
  });
}

describe('batch.maxSize at its maximum', () => {
  it(`a batch of MAX_BATCH_SIZE (${MAX_BATCH_SIZE}) entries is handled in one call and acknowledged`, async () => {
    const streamPrefix = uniqueName('max-batch');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 1 });
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(entries(MAX_BATCH_SIZE));
    const calls: number[] = [];
    const { errors } = await aMember({
      streamPrefix,
      batchSize: MAX_BATCH_SIZE,
      maxBufferedEntries: MAX_BATCH_SIZE,
      batch: { maxSize: MAX_BATCH_SIZE },
      handler: async (messages: StreamMessage<KeyedPayload>[]) => {
        calls.push(messages.length);
      },
    });
    await pollUntil('every entry handled', async () => calls.reduce((a, b) => a + b, 0) >= MAX_BATCH_SIZE, { timeoutMs: 20_000 });
    expect(calls).toEqual([MAX_BATCH_SIZE]);
    await nothingPendingOrUnread(streamPrefix, errors);
  });

  /**
   * MAX_BATCH_SIZE entries written and read by `consumer` in one transaction, so no read of the
   * member's can take any of them: they are pending at that consumer, delivered to nobody else.
   */
  async function pendingAt(streamPrefix: string, consumer: string) {
    const stream = keys.shardStream(streamPrefix, 0);
    const multi = redis.client().multi();
    for (let seq = 1; seq <= MAX_BATCH_SIZE; seq++) multi.xadd(stream, '*', 'p', JSON.stringify({ seq }), 'k', `k${seq % 7}`);
    multi.xreadgroup('GROUP', 'group', consumer, 'COUNT', MAX_BATCH_SIZE, 'STREAMS', stream, '>');
    await multi.exec();
    expect(((await redis.client().xpending(stream, 'group')) as [number])[0]).toBe(MAX_BATCH_SIZE);
  }

  it.each([
    ['taken over from a former owner when the shard is gained', 'before'],
    ["swept from another consumer (a zombie's late read)", 'zombie'],
    ['recovered from its own name when it does not track them (a lost read reply)', 'own'],
  ])(`MAX_BATCH_SIZE entries pending are %s, and handled in one call`, async (_, where) => {
    const streamPrefix = uniqueName('max-claim');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 1 });
    await redis.client().xgroup('CREATE', keys.shardStream(streamPrefix, 0), 'group', '0', 'MKSTREAM');
    if (where === 'before') await pendingAt(streamPrefix, 'former-owner');
    const calls: number[] = [];
    const memberId = uniqueName('member');
    const { member, errors } = await aMember({
      streamPrefix,
      memberId,
      batchSize: MAX_BATCH_SIZE,
      maxBufferedEntries: MAX_BATCH_SIZE,
      sweepIntervalMs: 200,
      batch: { maxSize: MAX_BATCH_SIZE },
      handler: async (messages: StreamMessage<KeyedPayload>[]) => {
        calls.push(messages.length);
      },
    });
    await pollUntil('the shard owned', async () => member.stats().ownedShards.length === 1);
    if (where !== 'before') await pendingAt(streamPrefix, where === 'own' ? memberId : 'zombie');
    await nothingPendingOrUnread(streamPrefix, errors);
    expect(calls).toEqual([MAX_BATCH_SIZE]);
  });
});

describe('lanes, runtimeMaxConcurrency and batchSize at their maximum', () => {
  it(`MAX_LANES (${MAX_LANES}) keys of one shard run at once under MAX_RUNTIME_CONCURRENCY (${MAX_RUNTIME_CONCURRENCY}), read MAX_BATCH_SIZE at a time, and are all acknowledged`, async () => {
    const streamPrefix = uniqueName('max-lanes');
    const count = Math.min(MAX_LANES, MAX_RUNTIME_CONCURRENCY);
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 1 });
    // One key per entry: each may take its own lane.
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
      Array.from({ length: count }, (_, i) => ({ key: `key-${i}`, payload: { seq: i + 1 }, shardIndex: 0 })),
    );
    let openGate: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (openGate = resolve));
    let running = 0;
    let most = 0;
    let handled = 0;
    const { member, errors } = await aMember({
      streamPrefix,
      lanes: MAX_LANES,
      runtimeMaxConcurrency: MAX_RUNTIME_CONCURRENCY,
      batchSize: MAX_BATCH_SIZE,
      maxBufferedEntries: MAX_BATCH_SIZE,
      handler: async () => {
        running += 1;
        most = Math.max(most, running);
        await gate;
        running -= 1;
        handled += 1;
      },
    });
    await pollUntil(`${count} handlers running at once`, async () => running === count, { timeoutMs: 20_000 }).catch((error: Error) => {
      throw new Error(
        `${error.message} (at most ${most}, ${member.stats().bufferedEntries} buffered); the member reported: ${[...errors].join('; ')}`,
      );
    });
    openGate();
    await pollUntil('every entry handled', async () => handled === count, { timeoutMs: 20_000 });
    await nothingPendingOrUnread(streamPrefix, errors);
    expect(most).toBe(count);
  });
});

describe('one past each maximum', () => {
  const handler = () => undefined;
  const streamPrefix = 'past-max';
  it.each([
    ['lanes', { lanes: MAX_LANES + 1, runtimeMaxConcurrency: 1 }, MAX_LANES + 1],
    ['runtimeMaxConcurrency', { runtimeMaxConcurrency: MAX_RUNTIME_CONCURRENCY + 1 }, MAX_RUNTIME_CONCURRENCY + 1],
    ['batchSize', { batchSize: MAX_BATCH_SIZE + 1 }, MAX_BATCH_SIZE + 1],
    ['batch.maxSize', { batch: { maxSize: MAX_BATCH_SIZE + 1 } }, MAX_BATCH_SIZE + 1],
    ['shardCount', { shardCount: MAX_SHARD_COUNT + 1 }, MAX_SHARD_COUNT + 1],
  ])('%s is a RangeError naming the option and the value', (option, options, value) => {
    expect(
      () =>
        new CoordinatedMember(redis.client(), {
          streamPrefix,
          consumerGroup: 'group',
          handler,
          ...options,
        } as BatchMemberOptions<KeyedPayload>),
    ).toThrow(new RangeError(`${option} must be an integer from 1 to ${value - 1}, got ${value}`));
  });

  it('createStream and resizeShards refuse MAX_SHARD_COUNT + 1 the same way', async () => {
    const admin = new CoordinatorAdmin(redis.client());
    await expect(admin.createStream({ streamPrefix, shardCount: MAX_SHARD_COUNT + 1 })).rejects.toThrow(
      new RangeError(`shardCount must be an integer from 1 to ${MAX_SHARD_COUNT}, got ${MAX_SHARD_COUNT + 1}`),
    );
    await expect(admin.resizeShards(streamPrefix, MAX_SHARD_COUNT + 1)).rejects.toThrow(
      new RangeError(`newCount must be an integer from 1 to ${MAX_SHARD_COUNT}, got ${MAX_SHARD_COUNT + 1}`),
    );
  });
});
