import { describe, expect, it } from 'vitest';
import {
  CoordinatorAdmin,
  GroupNotFoundError,
  KeyBuilder,
  PartialBatchError,
  type PayloadCodec,
  StreamProducer,
  shardForKey,
} from '@redis-stream-coordinator/core';
import { keyedMessages, type KeyedPayload } from '../support/handler-recorder';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

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
    expect(fields).toEqual(['p', '{"text":"hi"}', 'c', 'json', 'k', 'user-42', 'h', '{"traceId":"x"}']);
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
    expect(fields).toEqual(['p', 'HELLO', 'c', 'upper']); // the codec's name goes with each entry
  });

  it('refuses a shardIndex outside the stream, a stream without metadata, and bad options, naming them', async () => {
    const streamPrefix = await aStream(2);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await expect(producer.send({ payload: 1, shardIndex: 2 })).rejects.toThrow(/shardIndex must be an integer from 0 to 1, got 2/);
    await expect(new StreamProducer(redis.client(), { streamPrefix: 'nowhere' }).send({ payload: 1 })).rejects.toBeInstanceOf(
      GroupNotFoundError,
    );
    expect(() => new StreamProducer(redis.client(), { streamPrefix: 'a b' })).toThrow(/streamPrefix "a b" is invalid/);
    expect(() => new StreamProducer(redis.client(), { streamPrefix, maxLenApprox: 0 })).toThrow(/maxLenApprox must be an integer/);
    await expect(producer.send({ payload: undefined })).rejects.toThrow(/cannot be encoded as JSON/);
  });

  it('refuses a message that is not { payload, key?, headers?, shardIndex? }, naming what is wrong, and writes nothing', async () => {
    const streamPrefix = await aStream(1);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const bare = { data: { name: 'tamim' }, correlationId: 'c-1' } as never;
    await expect(producer.send(bare)).rejects.toThrow(
      'a message is { payload, key?, headers?, shardIndex?, delayMs?, deliverAt? }: this one has no payload (its fields: data, correlationId); put the data in payload and string headers in headers',
    );
    await expect(producer.send({ payload: 1, tenant: 'acme' } as never)).rejects.toThrow(
      `a message is { payload, key?, headers?, shardIndex?, delayMs?, deliverAt? }: "tenant" is not one of its fields; a header goes in headers: { "tenant": '…' }`,
    );
    await expect(producer.sendBatch([{ payload: 1 }, 'text' as never])).rejects.toThrow(
      'a message is { payload, key?, headers?, shardIndex?, delayMs?, deliverAt? }, got string',
    );
    expect(await redis.client().xlen(keys.shardStream(streamPrefix, 0))).toBe(0);
  });

  it('sendBatch with memory full mid-batch reports per entry what landed, and retrying the rest keeps every key in order', async () => {
    const streamPrefix = await aStream(4);
    const client = redis.client();
    const producer = new StreamProducer(client, { streamPrefix });
    const warmUp = await producer.send({ key: 'warm-up', payload: { seq: 0 } }); // scripts loaded before memory runs out
    // 1,000 entries of ~1 KB over 4 shards (~250 KB each); the first shards' writes fit, the rest hit OOM.
    const batch = keyedMessages(40, 25).map((m) => ({ ...m, headers: { pad: 'x'.repeat(1000) } }));
    const used = Number(/used_memory:(\d+)/.exec(await client.info('memory'))![1]);
    await client.config('SET', 'maxmemory-policy', 'noeviction');
    await client.config('SET', 'maxmemory', String(used + 400_000));
    let partial: PartialBatchError<KeyedPayload> | undefined;
    try {
      await producer.sendBatch(batch);
    } catch (error) {
      partial = error as PartialBatchError<KeyedPayload>;
    } finally {
      await client.config('SET', 'maxmemory', '0');
    }
    expect(partial).toBeInstanceOf(PartialBatchError);
    const { written, failed } = partial!;
    expect(written.length).toBeGreaterThan(0);
    expect(failed.length).toBeGreaterThan(0);
    expect(written.length + failed.length).toBe(batch.length);
    expect(failed.some((f) => /OOM/.test(f.error.message))).toBe(true);
    expect(failed.every((f) => !f.maybeWritten)).toBe(true);

    // What it says landed is exactly what is in the streams, with those ids.
    const stored: string[] = [];
    for (let shard = 0; shard < 4; shard++) {
      for (const [id] of await client.xrange(keys.shardStream(streamPrefix, shard), '-', '+')) stored.push(`${shard}/${id}`);
    }
    expect(stored.sort()).toEqual([warmUp, ...written].map((w) => `${w.shardIndex}/${w.id}`).sort());

    // The documented retry: every key's entries end up once each, in order, in its shard.
    const retried = await producer.sendBatch(partial!.retryBatch());
    expect(retried).toHaveLength(failed.length);
    const seqByKey = new Map<string, number[]>();
    for (let shard = 0; shard < 4; shard++) {
      for (const [, fields] of await client.xrange(keys.shardStream(streamPrefix, shard), '-', '+')) {
        const key = fields[fields.indexOf('k') + 1];
        if (key === 'warm-up') continue;
        seqByKey.set(key, [...(seqByKey.get(key) ?? []), (JSON.parse(fields[fields.indexOf('p') + 1]) as KeyedPayload).seq]);
      }
    }
    expect(seqByKey.size).toBe(40);
    for (const seqs of seqByKey.values()) expect(seqs).toEqual(Array.from({ length: 25 }, (_, i) => i + 1));
  });

  it("send() rejects with the entry's own error, not a batch error", async () => {
    const streamPrefix = await aStream(1);
    const client = redis.client();
    await client.set(keys.shardStream(streamPrefix, 0), 'not a stream');
    await expect(new StreamProducer(client, { streamPrefix }).send({ payload: 1 })).rejects.toThrow(/WRONGTYPE/);
  });

  it('with shardCount, recreates the stream metadata after Redis lost every key; without it, one clear error naming the prefix', async () => {
    const streamPrefix = await aStream(3);
    const client = redis.client();
    const recreating = new StreamProducer(client, { streamPrefix, shardCount: 3, metadataRefreshMs: 1 });
    const plain = new StreamProducer(client, { streamPrefix, metadataRefreshMs: 1 });
    await recreating.send({ key: 'a', payload: 1 });
    await plain.send({ key: 'a', payload: 1 });
    await client.del(keys.streamMeta(streamPrefix)); // what FLUSHALL does to this stream, without touching other tests' keys
    // The next look at the metadata (at most metadataRefreshMs later) finds none.
    const refused = await pollUntil<Error>('the plain producer refused', () =>
      plain.send({ key: 'a', payload: 2 }).then(
        () => false as const,
        (error: unknown) => error as Error,
      ),
    );
    expect(refused).toBeInstanceOf(GroupNotFoundError);
    expect(refused.message).toMatch(new RegExp(`stream "${streamPrefix}" does not exist \\(it has no metadata\\).*shardCount`));
    await expect(plain.send({ key: 'a', payload: 3 })).rejects.toBeInstanceOf(GroupNotFoundError);
    const admin = new CoordinatorAdmin(client);
    await pollUntil('the metadata recreated', async () => {
      expect((await recreating.send({ key: 'a', payload: 2 })).shardIndex).toBe(shardForKey('a', 3));
      return admin.describeStream(streamPrefix).then((d) => d ?? false);
    });
    expect(await admin.describeStream(streamPrefix)).toMatchObject({ shardCount: 3, metadataVersion: 1 });
    expect(() => new StreamProducer(client, { streamPrefix, shardCount: 0 })).toThrow(/shardCount must be an integer/);
  });
});
