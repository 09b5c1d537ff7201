import { describe, expect, it } from 'vitest';
import {
  AckRefusedError,
  type AckRefusedEvent,
  CoordinatedMember,
  CoordinatorAdmin,
  type StreamMessage,
  StreamProducer,
} from '@redis-stream-coordinator/core';
import type { KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const aMember = memberFactory(redis, { ackMode: 'manual' });

async function settled(streamPrefix: string) {
  await pollUntil('nothing pending or unread', async () =>
    (await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group')).shards.every((s) => s.pending === 0 && s.lag === 0),
  );
}

describe("ackMode 'manual'", () => {
  it('the next entry of the shard waits until the current one is acked, from code the handler handed it to', async () => {
    const streamPrefix = uniqueName('manual');
    const log: string[] = [];
    const acked: Promise<void>[] = [];
    const member = aMember({
      streamPrefix,
      memberId: 'a',
      shardCount: 1,
      handler: (message) => {
        log.push(`start ${message.payload.seq}`);
        // Handed on: the handler returns at once, the ack comes 50 ms later.
        setTimeout(() => {
          log.push(`ack ${message.payload.seq}`);
          acked.push(message.ack());
        }, 50);
      },
    });
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch([1, 2, 3].map((seq) => ({ key: 'k', payload: { seq } })));
    await pollUntil('3 acks', async () => acked.length === 3);
    await Promise.all(acked); // each ack() resolves once its fenced acknowledgement landed
    expect(log).toEqual(['start 1', 'ack 1', 'start 2', 'ack 2', 'start 3', 'ack 3']);
    await settled(streamPrefix);
  });

  it('with lanes, only the next entry of the same key waits for the ack', async () => {
    const streamPrefix = uniqueName('manual-lanes');
    const held: StreamMessage<KeyedPayload>[] = [];
    const member = aMember({ streamPrefix, memberId: 'a', shardCount: 1, lanes: 4, handler: (message) => void held.push(message) });
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch([
      { key: 'a', payload: { seq: 1 } },
      { key: 'a', payload: { seq: 2 } },
      { key: 'b', payload: { seq: 1 } },
      { key: 'c', payload: { seq: 1 } },
    ]);
    await pollUntil('a1, b1 and c1 started', async () => held.length === 3);
    expect(held.map((m) => `${m.key}${m.payload.seq}`)).toEqual(['a1', 'b1', 'c1']);
    await held[1].ack();
    await held[2].ack();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(held).toHaveLength(3); // a2 still waits for a1
    await held[0].ack();
    await pollUntil('a2 started', async () => held.length === 4);
    expect(`${held[3].key}${held[3].payload.seq}`).toBe('a2');
    await held[3].ack();
    await settled(streamPrefix);
  });

  it('nack({ retryAfterMs }) retries the entry after that delay; nacked out, it is dead-lettered', async () => {
    const streamPrefix = uniqueName('manual-nack');
    const tries: number[] = [];
    const deadLetters: string[] = [];
    const member = aMember({
      streamPrefix,
      memberId: 'a',
      shardCount: 1,
      maxAttempts: 3,
      handler: (message) => {
        tries.push(Date.now());
        void message.nack({ retryAfterMs: 150, reason: 'not ready' });
      },
    });
    member.on('dead-letter', (event) => deadLetters.push(event.reason));
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 1 } });
    await pollUntil('dead-lettered', async () => deadLetters.length === 1);
    expect(tries).toHaveLength(3);
    expect(tries[1] - tries[0]).toBeGreaterThanOrEqual(140);
    expect(deadLetters).toEqual(['NackedError: not ready']);
  });

  it('an entry not settled within ackTimeoutMs fails the attempt; its late ack is refused and reported', async () => {
    const streamPrefix = uniqueName('manual-timeout');
    const messages: StreamMessage<KeyedPayload>[] = [];
    const refusals: AckRefusedEvent[] = [];
    const member = aMember({
      streamPrefix,
      memberId: 'a',
      shardCount: 1,
      ackTimeoutMs: 200,
      retryBackoffMs: 10,
      handler: (message) => {
        messages.push(message);
        if (message.deliveryCount === 2) void message.ack();
      },
    });
    member.on('ack-refused', (event) => refusals.push(event));
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 1 } });
    await pollUntil('the retry', async () => messages.length === 2);
    expect(messages[0].signal.aborted).toBe(true);
    await settled(streamPrefix);
    const late = await messages[0].ack().catch((error: unknown) => error);
    expect(late).toBeInstanceOf(AckRefusedError);
    expect(late).toMatchObject({ reason: 'settled', entryId: messages[0].id });
    expect(refusals).toEqual([expect.objectContaining({ reason: 'settled', entryId: messages[0].id, shardIndex: 0 })]);
    expect(member.stats().refusedAcks).toBe(1);
  });

  it('an entry never settled fails each attempt with AckTimeoutError, and is dead-lettered with it after maxAttempts', async () => {
    const streamPrefix = uniqueName('manual-never');
    const member = aMember({
      streamPrefix,
      shardCount: 1,
      ackTimeoutMs: 200,
      retryBackoffMs: 10,
      maxAttempts: 2,
      handler: () => undefined,
    });
    const deadLetters: string[] = [];
    member.on('dead-letter', (event) => deadLetters.push(event.reason));
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 1 } });
    await pollUntil('dead-lettered', async () => deadLetters.length === 1);
    expect(deadLetters).toEqual(['AckTimeoutError: neither acked nor nacked within 200 ms']);
  });

  it('an ack after the shard was revoked is refused and reported; the next owner runs the entry again', async () => {
    const streamPrefix = uniqueName('manual-revoked');
    const held: StreamMessage<KeyedPayload>[] = [];
    const refusals: AckRefusedEvent[] = [];
    const first = aMember({
      streamPrefix,
      memberId: 'first',
      shardCount: 2,
      runtimeMaxConcurrency: 2,
      revocationTimeoutMs: 200,
      shutdownTimeoutMs: 300,
      handler: (message) => void held.push(message),
    });
    first.on('ack-refused', (event) => refusals.push(event));
    await first.start();
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
      [0, 1].map((shardIndex) => ({ key: `k${shardIndex}`, payload: { seq: 1 }, shardIndex })),
    );
    await pollUntil('both entries held unacked', async () => held.length === 2);
    const rerun: StreamMessage<KeyedPayload>[] = [];
    const second = aMember({ streamPrefix, memberId: 'second', shardCount: 2, handler: (message) => void rerun.push(message) });
    await second.start();
    await pollUntil('one shard moved', async () => first.ownedShards().length === 1 && rerun.length === 1);
    const moved = held.find((m) => m.shardIndex === rerun[0].shardIndex)!;
    expect(moved.signal.aborted).toBe(true);
    await expect(moved.ack()).rejects.toMatchObject({ name: 'AckRefusedError', reason: 'released' });
    expect(refusals).toEqual([expect.objectContaining({ reason: 'released', entryId: moved.id })]);
    expect(first.stats().refusedAcks).toBe(1);
    expect(rerun[0]).toMatchObject({ id: moved.id, deliveryCount: 2 });
    // The shard it kept still takes its ack.
    await held.find((m) => m !== moved)!.ack();
    await rerun[0].ack();
    await settled(streamPrefix);
  });

  it("ack() in ackMode 'auto' is refused: the member acknowledges on its own", async () => {
    const streamPrefix = uniqueName('auto-ack');
    const outcomes: unknown[] = [];
    const member = aMember({
      streamPrefix,
      memberId: 'a',
      shardCount: 1,
      ackMode: 'auto',
      handler: async (message) => void outcomes.push(await message.ack().catch((e: unknown) => e)),
    });
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 1 } });
    await pollUntil('handled', async () => outcomes.length === 1);
    expect(outcomes[0]).toMatchObject({ name: 'AckRefusedError', reason: 'auto' });
    await settled(streamPrefix);
  });

  it('refuses a bad ackMode, and ackTimeoutMs without manual acks', () => {
    const base = { streamPrefix: 'x', consumerGroup: 'g', handler: () => undefined };
    expect(() => new CoordinatedMember(redis.client(), { ...base, ackMode: 'later' as 'manual' })).toThrow(
      `ackMode must be 'auto' or 'manual', got "later"`,
    );
    expect(() => new CoordinatedMember(redis.client(), { ...base, ackTimeoutMs: 100 })).toThrow(
      /ackTimeoutMs \(100\) applies to ackMode 'manual' only/,
    );
  });
});
