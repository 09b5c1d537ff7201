import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, StreamProducer } from '@redis-stream-coordinator/core';
import { shardForKey } from '../../packages/core/src/producer/key-hash';
import { pollUntil } from '../support/poll';
import { useRedisServer } from '../support/vitest-redis';
import { BLOCK_MS, giversFixtures, keyRouted, keys, recorder } from './givers-attack-fixtures';

// Attack review of 91f85ac ("Delayed order across resizes holds whichever owner is slow"): a shard
// that received keys releases only below its givers' first score. These tests probe what that bound does not cover.
// Each `it.fails` fails on the code as of 91f85ac (the branch stays green).

const redis = useRedisServer();
const { aMember, aStream, redisNow, streamSeqs, slowReleaser } = giversFixtures(redis);

describe('attack on 91f85ac: delayed order across resizes', () => {
  it.fails("growth, the RECEIVER slow: the old shard's owner writes the key's due entry straight into the new shard's stream, ahead of the key's earlier-due entry still in the new shard's schedule", async () => {
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
    await pollUntil('the first moved into shard 2', async () => (await streamSeqs(streamPrefix, 2)).length === 1, { timeoutMs: 15_000 });
    slow.releasesFrom = 0;
    await pollUntil('both handled', async () => recorded.seen.length === 2, { timeoutMs: 15_000 });
    console.log('receiver slow:', { stream2: await streamSeqs(streamPrefix, 2), handled: recorded.seqsOf(key) });
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
    const shrunk = await admin.resizeShards(streamPrefix, 3, { ordered, graceMs: 50, switchDelayMs: 50 });
    // Give shard 3's owner a few turns with the new history while shard 0's owner is still slow.
    await new Promise((resolve) => setTimeout(resolve, 6 * BLOCK_MS));
    const beforeSwitch = (await redisNow()) < Date.parse(shrunk.switchAt!);
    const streamsBefore = await Promise.all([0, 1, 2, 3].map((i) => streamSeqs(streamPrefix, i)));
    slow.releasesFrom = 0;
    await pollUntil('both handled', async () => recorded.seen.length === 2, { timeoutMs: 15_000 });
    const streams = await Promise.all([0, 1, 2, 3].map((i) => streamSeqs(streamPrefix, i)));
    console.log(label, { key3: shardForKey(key, 3), beforeSwitch, streamsBefore, streams, handled: recorded.seqsOf(key) });
    expect(recorded.seqsOf(key)).toEqual([1, 2]);
  }

  it.fails("growth 2 -> 4 then an ORDERED shrink 4 -> 3, before its switch: the member's givers already use the new count, so shard 3 (still live under 4) has none and releases the key's later entry ahead of the one still on shard 0", () =>
    growThenShrink('atk-chain-pending', true));

  it.fails("growth 2 -> 4 then an UNORDERED shrink 4 -> 3: the removed shard 3, which received the key in the growth, has no givers and moves the key's due entry straight into its key's stream, past the key's earlier one still on shard 0", () =>
    growThenShrink('atk-chain-removed', false));

  it.fails("ordered growth, every owner on time: the new shard is not released during the cutover, so the old shard's owner writes the key's later-due entry into its stream first", async () => {
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
    console.log('cutover:', { stream2: await streamSeqs(streamPrefix, 2), handled: recorded.seqsOf(key) });
    expect(recorded.seqsOf(key)).toEqual([2, 1]);
    await member.stop();
  });

  it.fails("unordered shrink 2 -> 1 while the member's metadata read fails: it releases with its resize history of before, so the surviving shard has no givers and releases the key's later entry ahead of the one still on the removed shard", async () => {
    const streamPrefix = await aStream(2, 'atk-stale-history');
    const key = keyRouted([2, 1], [1, 0]);
    const metadataReads = { fail: false };
    const { slow, recorded, member } = await slowReleaser(streamPrefix, keys.shardSchedule(streamPrefix, 1), 2, (name, args) =>
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
    console.log('stale history:', {
      stream0Behind,
      stream0: await streamSeqs(streamPrefix, 0),
      handled: recorded.seqsOf(key),
      problems: member.stats().problems.length,
    });
    expect(recorded.seqsOf(key)).toEqual([1, 2]);
  });
});
