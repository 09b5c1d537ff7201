import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, ResizeInProgressError, StreamProducer, shardForKey } from '@redis-stream-coordinator/core';
import { HandlerRecorder } from './support/handler-recorder';
import { memberFactory } from './support/member-factory';
import { pollUntil } from './support/poll';
import { uniqueName, useRedisServer } from './support/vitest-redis';

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
  await pollUntil('every cutover completed', async () => (await admin.cutoverStatus(streamPrefix)).every((s) => s.cutover === null), { timeoutMs: 20_000 });
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
    await expect(admin.deleteDrainedShards(streamPrefix)).rejects.toThrow(/removed shard 2 still holds 3 entries group group has not processed/);
    expect(await redis.client().xlen(keys.shardStream(streamPrefix, 2))).toBe(3);
    // And no producer can add to it any more: the marker refuses writes addressed there.
    await expect(new StreamProducer(redis.client(), { streamPrefix }).send({ shardIndex: 2, payload: 1 })).rejects.toThrow(/shardIndex/);
  }, 30_000);
});
