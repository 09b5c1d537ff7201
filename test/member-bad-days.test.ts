import { describe, expect, it } from 'vitest';
import {
  CoordinatorAdmin,
  KeyBuilder,
  StreamProducer,
  type StreamMessage,
} from '@redis-stream-coordinator/core';
import { HandlerRecorder, type KeyedPayload } from './support/handler-recorder';
import { memberFactory } from './support/member-factory';
import { pollUntil } from './support/poll';
import { uniqueName, useRedisServer } from './support/vitest-redis';

// AOF with appendfsync always: what Redis acknowledged survives a restart.
const redis = useRedisServer({ persistence: 'aof' });
const aMember = memberFactory(redis, { retryBackoffMs: 1 }, () => redis.client({ maxRetriesPerRequest: 1 }));

/** Sends a batch, again and again while Redis is away (a batch may then be written twice: at-least-once). */
async function sendSurely(producer: StreamProducer, messages: { key: string; payload: KeyedPayload }[]) {
  for (;;) {
    try {
      return await producer.sendBatch(messages);
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

describe('bad days', () => {
  it('a hung handler is bounded by handlerTimeoutMs: retried, dead-lettered, and the shard moves on', async () => {
    const streamPrefix = uniqueName('hang');
    const handled: number[] = [];
    const timeouts: string[] = [];
    const member = aMember({
      streamPrefix,
      shardCount: 1,
      maxAttempts: 2,
      handlerTimeoutMs: 100,
      handler: (message: StreamMessage<KeyedPayload>) => {
        if (message.payload.seq === 1) return new Promise<void>(() => undefined); // never settles
        handled.push(message.payload.seq);
        return undefined;
      },
    });
    member.on('error', (error) => /did not settle within handlerTimeoutMs/.test(error.message) && timeouts.push(error.message));
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch([1, 2].map((seq) => ({ key: 'k', payload: { seq } })));
    await pollUntil('the entry after the hung one', async () => handled.includes(2));
    expect(timeouts).toHaveLength(2);
    const [letter] = await redis.client().xrange(new KeyBuilder().deadLetterStream(streamPrefix, 'group'), '-', '+');
    expect(letter[1]).toEqual(expect.arrayContaining(['error', 'HandlerTimeoutError: handler did not settle within 100 ms', 'attempts', '2']));
  });

  it('Redis restarts (AOF) while members run and a producer writes: nothing is lost', async () => {
    const streamPrefix = uniqueName('restart');
    const recorder = new HandlerRecorder();
    const members = ['a', 'b'].map((id) =>
      aMember({ streamPrefix, memberId: id, shardCount: 6, runtimeMaxConcurrency: 3, sessionTimeoutMs: 10_000, handler: recorder.handler(id) }),
    );
    await Promise.all(members.map((m) => m.start()));
    const producer = new StreamProducer(redis.client({ maxRetriesPerRequest: 1 }), { streamPrefix });
    const produced = new Set<string>();
    for (let round = 1; round <= 60; round++) {
      const batch = Array.from({ length: 20 }, (_, k) => ({ key: `key-${k}`, payload: { seq: round } }));
      await sendSurely(producer, batch);
      for (const m of batch) produced.add(`${m.key}/${m.payload.seq}`);
      if (round === 30) await redis.server.restart();
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    const handledKeys = () => new Set(recorder.runs.map((r) => `${r.key}/${r.seq}`));
    await pollUntil('every produced entry handled', async () => [...produced].every((k) => handledKeys().has(k)), { timeoutMs: 30_000 });
    expect(recorder.orderViolations()).toEqual([]);
    await pollUntil('nothing pending', async () => {
      const { shards } = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
      return shards.every((s) => s.pending === 0 && s.lag === 0);
    });
  }, 60_000);

  it('SCRIPT FLUSH under load: the scripts are reloaded (NOSCRIPT) and work goes on', async () => {
    const streamPrefix = uniqueName('flush');
    const recorder = new HandlerRecorder();
    const member = aMember({ streamPrefix, shardCount: 4, runtimeMaxConcurrency: 4, handler: recorder.handler('m') });
    await member.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(Array.from({ length: 500 }, (_, i) => ({ key: `k${i % 10}`, payload: { seq: Math.floor(i / 10) + 1 } })));
    await redis.client().script('FLUSH');
    await producer.sendBatch(Array.from({ length: 500 }, (_, i) => ({ key: `k${i % 10}`, payload: { seq: Math.floor(i / 10) + 51 } })));
    await pollUntil('1,000 entries handled', async () => recorder.distinctEntries() === 1000);
    await pollUntil('everything acknowledged', async () => {
      const { shards } = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
      return shards.every((s) => s.pending === 0);
    });
    expect(recorder.orderViolations()).toEqual([]);
  });
});
