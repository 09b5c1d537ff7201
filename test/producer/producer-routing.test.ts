import { describe, expect, it } from 'vitest';
import {
  CoordinatorAdmin,
  GroupNotFoundError,
  KeyBuilder,
  ResizeInProgressError,
  StreamProducer,
  shardForKey,
} from '@redis-stream-coordinator/core';
import { HandlerRecorder } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const aMember = memberFactory(redis, { coordinator: { heartbeatIntervalMs: 200 }, sessionTimeoutMs: 1000, cutoverCheckIntervalMs: 50 });
const keys = new KeyBuilder();
/** A producer that looked at the metadata once and not again: its writes are as late as writes get. */
const stale = (streamPrefix: string) => new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 3_600_000 });
const keyOn = (shard: number, count: number, not?: { shard: number; count: number }) => {
  for (let i = 0; ; i++) {
    const key = `key-${i}`;
    if (shardForKey(key, count) === shard && (!not || shardForKey(key, not.count) !== not.shard)) return key;
  }
};

async function noCutover(admin: CoordinatorAdmin, streamPrefix: string) {
  await pollUntil('every cutover completed', async () => (await admin.cutoverStatus(streamPrefix)).every((s) => s.cutover === null), {
    timeoutMs: 20_000,
  });
}

describe('producer writes honour the shard count in effect (SPEC 9.5)', () => {
  it('a write routed before an ordered shrink and arriving after it is re-routed to a surviving shard and handled, not lost on a removed shard', async () => {
    const streamPrefix = uniqueName('late-shrink');
    const admin = new CoordinatorAdmin(redis.client());
    const recorder = new HandlerRecorder();
    const member = aMember({ streamPrefix, memberId: 'a', shardCount: 4, handler: recorder.handler('a') });
    await member.start();
    const late = stale(streamPrefix);
    const removedKey = keyOn(3, 4);
    expect((await late.send({ key: removedKey, payload: { seq: 1 } })).shardIndex).toBe(3); // routes with 4 from now on

    await admin.resizeShards(streamPrefix, 2, { graceMs: 50, switchDelayMs: 50 });
    await noCutover(admin, streamPrefix);
    // Far past switchAt + graceMs, the stale producer writes with 4 shards: the removed shard refuses.
    const sent = await late.send({ key: removedKey, payload: { seq: 2 } });
    expect(sent.shardIndex).toBe(shardForKey(removedKey, 2));
    await pollUntil('both entries handled', async () => recorder.distinctEntries() === 2);
    expect(recorder.runs.map((r) => r.seq)).toEqual([1, 2]);
    expect(await redis.client().xlen(keys.shardStream(streamPrefix, 3))).toBe(1);
    expect(await admin.deleteDrainedShards(streamPrefix)).toEqual([2, 3]);
  }, 30_000);

  it('a stale producer cannot write a moved key to its old shard after a growth switched', async () => {
    const streamPrefix = uniqueName('late-grow');
    const admin = new CoordinatorAdmin(redis.client());
    await admin.createStream({ streamPrefix, shardCount: 2 });
    const late = stale(streamPrefix);
    const movedKey = keyOn(2, 3);
    const oldShard = shardForKey(movedKey, 2);
    expect((await late.send({ key: movedKey, payload: { seq: 1 } })).shardIndex).toBe(oldShard);
    await admin.resizeShards(streamPrefix, 3, { ordered: false });
    expect((await late.send({ key: movedKey, payload: { seq: 2 } })).shardIndex).toBe(2);
    expect(await redis.client().xlen(keys.shardStream(streamPrefix, oldShard))).toBe(1);
  });

  it('deleteDrainedShards looks at the removed shards and refuses, naming shard and count, while one holds unprocessed entries', async () => {
    const streamPrefix = uniqueName('delete-check');
    const admin = new CoordinatorAdmin(redis.client());
    const recorder = new HandlerRecorder();
    const member = aMember({ streamPrefix, memberId: 'a', shardCount: 3, handler: recorder.handler('a') });
    await member.start();
    await admin.resizeShards(streamPrefix, 2, { graceMs: 50, switchDelayMs: 50 });
    await noCutover(admin, streamPrefix);
    // A writer that bypasses the producer (or one that raced the routing markers) put entries there.
    for (let i = 0; i < 3; i++) await redis.client().xadd(keys.shardStream(streamPrefix, 2), '*', 'p', '{"seq":1}');
    const refused = admin.deleteDrainedShards(streamPrefix);
    await expect(refused).rejects.toBeInstanceOf(ResizeInProgressError);
    await expect(admin.deleteDrainedShards(streamPrefix)).rejects.toThrow(
      /removed shard 2 still holds 3 entries group group has not processed/,
    );
    expect(await redis.client().xlen(keys.shardStream(streamPrefix, 2))).toBe(3);
    // And no producer can add to it any more: the marker refuses writes addressed there.
    await expect(new StreamProducer(redis.client(), { streamPrefix }).send({ shardIndex: 2, payload: 1 })).rejects.toThrow(/shardIndex/);
  }, 30_000);

  it('after Redis lost every key, a producer with a cached shard count writes nothing until it has seen the recreated stream (no key split across shards)', async () => {
    // The chaos short tier's order violation (stale-10 #17 after #18): the stream had been shrunk to
    // 3, Redis lost every key, members recreated it with their configured 4, and a producer that had
    // looked at the metadata just before wrote #17 with 3 shards (no marker left to refuse it), #18
    // with 4: two shards, read in parallel, so a group could handle #18 first.
    const streamPrefix = uniqueName('lost-keys');
    const client = redis.client();
    const admin = new CoordinatorAdmin(client);
    await admin.createStream({ streamPrefix, shardCount: 4 });
    await admin.resizeShards(streamPrefix, 3, { ordered: false, switchDelayMs: 0 });
    const late = stale(streamPrefix);
    const key = keyOn(2, 3, { shard: 2, count: 4 });
    expect((await late.send({ key, payload: { seq: 1 } })).shardIndex).toBe(2); // routes with 3 from now on

    await loseEveryKey(streamPrefix);
    // Before anyone recreated the stream: refused as a stream with no metadata, nothing written.
    await expect(late.send({ key, payload: { seq: 2 } })).rejects.toBeInstanceOf(GroupNotFoundError);
    expect(await client.exists(keys.shardStream(streamPrefix, 2))).toBe(0);

    await admin.createStream({ streamPrefix, shardCount: 4 }); // what a member given shardCount 4 does
    const sent = await late.send({ key, payload: { seq: 2 } });
    expect(sent.shardIndex).toBe(shardForKey(key, 4));
    expect(await client.exists(keys.shardStream(streamPrefix, 2))).toBe(0);
    // And every later entry of the key goes to the same shard.
    expect((await late.send({ key, payload: { seq: 3 } })).shardIndex).toBe(sent.shardIndex);
  });

  it('a stream whose shards have no routing marker (created before markers existed) still takes writes, and gets its markers', async () => {
    const streamPrefix = uniqueName('no-markers');
    const client = redis.client();
    await new CoordinatorAdmin(client).createStream({ streamPrefix, shardCount: 2 });
    await client.del(keys.shardRouting(streamPrefix, 0), keys.shardRouting(streamPrefix, 1));
    const producer = new StreamProducer(client, { streamPrefix });
    const sent = await producer.sendBatch([
      { shardIndex: 0, payload: 1 },
      { shardIndex: 1, payload: 2 },
    ]);
    expect(sent.map((s) => s.shardIndex)).toEqual([0, 1]);
    expect(await client.hgetall(keys.shardRouting(streamPrefix, 1))).toMatchObject({ count: '2', previous: '2', version: '1' });
  });
});

/** What a Redis restart without persistence does to one stream (without touching other tests' keys). */
async function loseEveryKey(streamPrefix: string): Promise<void> {
  const client = redis.client();
  let cursor = '0';
  do {
    const [next, found] = await client.scan(cursor, 'MATCH', `*${streamPrefix}*`, 'COUNT', 1000);
    if (found.length > 0) await client.del(...found);
    cursor = next;
  } while (cursor !== '0');
  expect(await client.keys(`*${streamPrefix}*`)).toEqual([]);
}
