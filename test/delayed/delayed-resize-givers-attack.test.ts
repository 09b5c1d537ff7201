import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, StreamProducer } from '@redis-stream-coordinator/core';
import { pollUntil } from '../support/poll';
import { useRedisServer } from '../support/vitest-redis';
import { BLOCK_MS, giversFixtures, keyRouted, keys, recorder } from './resize-fixtures';

// An attack review of 91f85ac ("Delayed order across resizes holds whichever owner is slow", a shard
// that received keys releases only below its givers' first score) found each of these; every one
// failed on 91f85ac and passes since: a due entry moved behind its key's shard's own due entries
// waits in that shard's schedule, removed shards keep the givers of their earlier growths, and a
// member behind its shard's routing marker releases nothing of its schedule.

const redis = useRedisServer();
const { aMember, aStream, redisNow, streamSeqs, slowReleaser } = giversFixtures(redis);

describe('delayed order across resizes: the attack review of the givers bound', () => {
  it("growth, the receiving shard's owner slow: the old shard's owner moves the key's due entry behind the key's earlier-due entry still in the new shard's schedule, not into its stream ahead of it", async () => {
    const streamPrefix = await aStream(2, 'atk-recv-slow');
    const key = keyRouted([2, 4], [0, 2]);
    const { slow, recorded, member } = await slowReleaser(streamPrefix, keys.shardSchedule(streamPrefix, 2), 2);
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 100 });
    const first = await producer.send({ key, payload: { seq: 1 }, delayMs: 4000 });
    expect(first.shardIndex).toBe(0);
    await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 4, { ordered: true, graceMs: 200 });
    await pollUntil('cutover completed, all four shards owned', async () => member.ownedShards().length === 4, { timeoutMs: 10_000 });
    // Sent after the switch with an earlier due time: due order says it is handled first.
    const second = await producer.send({ key, payload: { seq: 2 }, delayMs: 800 });
    expect(second.shardIndex).toBe(2);
    expect(second.dueAt!).toBeLessThan(first.dueAt!);
    // Moved off shard 0 once due: behind the second, still in shard 2's schedule (its owner slow).
    await pollUntil('the first moved off shard 0', async () => (await redis.client().zcard(keys.shardSchedule(streamPrefix, 0))) === 0, {
      timeoutMs: 15_000,
    });
    expect(await streamSeqs(streamPrefix, 2)).toEqual([]);
    slow.releasesFrom = 0;
    await pollUntil('both handled', async () => recorded.seen.length === 2, { timeoutMs: 15_000 });
    expect({ stream2: await streamSeqs(streamPrefix, 2), handled: recorded.seqsOf(key) }).toEqual({ stream2: [2, 1], handled: [2, 1] });
  });

  /**
   * A key routed to shard 0 under 2 shards and to shard 3 under 4: its first delayed entry waits on
   * shard 0 (whose release calls fail), its second, due 300 ms later, on shard 3, held there by the
   * bound (shard 0 gave shard 3 the key in the growth). Then a shrink to 3 (shard 3 removed).
   */
  async function growThenShrink(label: string, ordered: boolean) {
    const streamPrefix = await aStream(2, label);
    const key = keyRouted([2, 4], [0, 3]);
    const { slow, recorded, member } = await slowReleaser(streamPrefix, keys.shardSchedule(streamPrefix, 0), 2);
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 100 });
    const admin = new CoordinatorAdmin(redis.client());
    const first = await producer.send({ key, payload: { seq: 1 }, delayMs: 2500 });
    expect(first.shardIndex).toBe(0);
    await admin.resizeShards(streamPrefix, 4, { ordered: true, graceMs: 200 });
    await pollUntil('growth cutover completed, all four shards owned', async () => member.ownedShards().length === 4, {
      timeoutMs: 10_000,
    });
    const second = await producer.send({ key, payload: { seq: 2 }, delayMs: first.dueAt! - (await redisNow()) + 300 });
    expect(second.shardIndex).toBe(3);
    // Both due; shard 3 holds the second (its giver shard 0 still holds the first): as 91f85ac meant.
    await pollUntil('both due', async () => (await redisNow()) > second.dueAt! + 3 * BLOCK_MS, { timeoutMs: 10_000 });
    expect(await streamSeqs(streamPrefix, 3)).toEqual([]);
    await admin.resizeShards(streamPrefix, 3, { ordered, graceMs: 50, switchDelayMs: 50 });
    // Give shard 3's owner a few turns with the new history while shard 0's owner is still slow.
    await new Promise((resolve) => setTimeout(resolve, 6 * BLOCK_MS));
    slow.releasesFrom = 0;
    await pollUntil('both handled', async () => recorded.seen.length === 2, { timeoutMs: 15_000 });
    expect(recorded.seqsOf(key)).toEqual([1, 2]);
  }

  it("growth 2 -> 4 then an ordered shrink 4 -> 3, before its switch: shard 3 (still live under 4) waits for the key's earlier entry on shard 0, the giver of its growth", () =>
    growThenShrink('atk-chain-pending', true));

  it("growth 2 -> 4 then an unordered shrink 4 -> 3: the removed shard 3, which received the key in the growth, moves the key's due entry only after the key's earlier one left shard 0", () =>
    growThenShrink('atk-chain-removed', false));

  it("ordered growth, every owner on time: the new shard is not released during the cutover, and the key's later-due entry moved there waits behind the key's earlier-due one in its schedule", async () => {
    const streamPrefix = await aStream(2, 'atk-recv-cutover');
    const key = keyRouted([2, 4], [0, 2]);
    const recorded = recorder();
    const member = aMember({ streamPrefix, handler: recorded.handler, cutoverCheckIntervalMs: 50, sessionTimeoutMs: 3000 });
    await member.start();
    await pollUntil('both shards owned', async () => member.ownedShards().length === 2);
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 100 });
    const first = await producer.send({ key, payload: { seq: 1 }, delayMs: 1500 });
    await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 4, { ordered: true, graceMs: 3000 });
    const second = await producer.send({ key, payload: { seq: 2 }, delayMs: 300 });
    expect(second.shardIndex).toBe(2);
    expect(second.dueAt!).toBeLessThan(first.dueAt!);
    await pollUntil('both handled', async () => recorded.seen.length === 2, { timeoutMs: 15_000 });
    expect(recorded.seqsOf(key)).toEqual([2, 1]);
    await member.stop();
  });

  it("unordered shrink 2 -> 1 while the member's metadata read fails: behind the surviving shard's routing marker, it releases nothing of its schedule until it has read the resize", async () => {
    const streamPrefix = await aStream(2, 'atk-stale-history');
    const key = keyRouted([2, 1], [1, 0]);
    const metadataReads = { fail: false };
    const { slow, recorded } = await slowReleaser(streamPrefix, keys.shardSchedule(streamPrefix, 1), 2, (name, args) =>
      metadataReads.fail && name === 'hmget' && args.includes('resizeHistory') ? new Error('connection lost') : undefined,
    );
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 100 });
    const first = await producer.send({ key, payload: { seq: 1 }, delayMs: 2000 });
    expect(first.shardIndex).toBe(1);
    metadataReads.fail = true;
    const shrunk = await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 1, {
      ordered: false,
      graceMs: 50,
      switchDelayMs: 50,
    });
    await pollUntil('switched', async () => (await redisNow()) > Date.parse(shrunk.switchAt!), { timeoutMs: 10_000 });
    const second = await producer.send({ key, payload: { seq: 2 }, delayMs: first.dueAt! - (await redisNow()) + 300 });
    expect(second.shardIndex).toBe(0);
    await pollUntil('the second due', async () => (await redisNow()) > second.dueAt! + 3 * BLOCK_MS, { timeoutMs: 10_000 });
    const stream0Behind = await streamSeqs(streamPrefix, 0);
    metadataReads.fail = false;
    slow.releasesFrom = 0;
    await pollUntil('both handled', async () => recorded.seen.length === 2, { timeoutMs: 15_000 });
    // Nothing was released behind the marker: the stream holds the key's entries in order.
    expect({ stream0Behind, stream0: await streamSeqs(streamPrefix, 0), handled: recorded.seqsOf(key) }).toEqual({
      stream0Behind: [],
      stream0: [1, 2],
      handled: [1, 2],
    });
  });
});
