import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, GroupNotFoundError, KeyBuilder, type PayloadCodec, StreamProducer, shardForKey } from '@redis-stream-coordinator/core';
import { uniqueName, useRedisServer } from './support/vitest-redis';

const redis = useRedisServer();
const keys = new KeyBuilder();

async function aStream(shardCount: number) {
  const streamPrefix = uniqueName('produce');
  await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount });
  return streamPrefix;
}

describe('StreamProducer', () => {
  it('routes a key to shardForKey(key, shardCount), keeps the fields, and returns the entry id', async () => {
    const streamPrefix = await aStream(8);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const sent = await producer.send({ key: 'user-42', payload: { text: 'hi' }, headers: { traceId: 'x' } });
    expect(sent.shardIndex).toBe(shardForKey('user-42', 8));
    const [[id, fields]] = await redis.client().xrange(keys.shardStream(streamPrefix, sent.shardIndex), '-', '+');
    expect(id).toBe(sent.id);
    expect(fields).toEqual(['p', '{"text":"hi"}', 'k', 'user-42', 'h', '{"traceId":"x"}']);
  });

  it('sendBatch pipelines, answers in order, honours shardIndex, and spreads unkeyed entries round-robin', async () => {
    const streamPrefix = await aStream(4);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const results = await producer.sendBatch([
      { payload: 1 },
      { payload: 2 },
      { payload: 3 },
      { payload: 4 },
      { payload: 5, shardIndex: 2 },
    ]);
    expect(new Set(results.slice(0, 4).map((r) => r.shardIndex)).size).toBe(4);
    expect(results[4].shardIndex).toBe(2);
    for (const result of results) expect(result.id).toMatch(/^\d+-\d+$/);
  });

  it('trims approximately with maxLenApprox', async () => {
    const streamPrefix = await aStream(1);
    const producer = new StreamProducer(redis.client(), { streamPrefix, maxLenApprox: 10 });
    for (let i = 0; i < 10; i++) await producer.sendBatch(Array.from({ length: 100 }, (_, j) => ({ payload: i * 100 + j })));
    const length = await redis.client().xlen(keys.shardStream(streamPrefix, 0));
    expect(length).toBeLessThan(1000);
    expect(length).toBeGreaterThanOrEqual(10);
  });

  it('uses a pluggable codec', async () => {
    const streamPrefix = await aStream(1);
    const upper: PayloadCodec = { name: 'upper', encode: (p) => String(p).toUpperCase(), decode: (raw) => raw.toLowerCase() };
    const producer = new StreamProducer(redis.client(), { streamPrefix, codec: upper });
    await producer.send({ payload: 'hello' });
    const [[, fields]] = await redis.client().xrange(keys.shardStream(streamPrefix, 0), '-', '+');
    expect(fields).toEqual(['p', 'HELLO']);
  });

  it('refuses a shardIndex outside the stream, a stream without metadata, and bad options, naming them', async () => {
    const streamPrefix = await aStream(2);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await expect(producer.send({ payload: 1, shardIndex: 2 })).rejects.toThrow(/shardIndex must be an integer from 0 to 1, got 2/);
    await expect(new StreamProducer(redis.client(), { streamPrefix: 'nowhere' }).send({ payload: 1 })).rejects.toBeInstanceOf(GroupNotFoundError);
    expect(() => new StreamProducer(redis.client(), { streamPrefix: 'a b' })).toThrow(/streamPrefix "a b" is invalid/);
    expect(() => new StreamProducer(redis.client(), { streamPrefix, maxLenApprox: 0 })).toThrow(/maxLenApprox must be an integer/);
    await expect(producer.send({ payload: undefined })).rejects.toThrow(/cannot be encoded as JSON/);
  });
});
