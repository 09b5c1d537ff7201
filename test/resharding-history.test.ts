import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, StreamProducer, type StreamMessage } from '@redis-stream-coordinator/core';
import { HandlerRecorder, keyedMessages, type KeyedPayload } from './support/handler-recorder';
import { memberFactory } from './support/member-factory';
import { pollUntil } from './support/poll';
import { uniqueName, useRedisServer } from './support/vitest-redis';

const redis = useRedisServer();
const aMember = memberFactory(redis, { coordinator: { heartbeatIntervalMs: 200 }, sessionTimeoutMs: 1000, cutoverCheckIntervalMs: 20 });
/** Shards 0 and 1 hold the oldest entries; handling them slowly is what lets a later shard overtake them. */
const slowOnTheFirstShards = (message: StreamMessage<KeyedPayload>) =>
  message.shardIndex < 2 ? new Promise<void>((resolve) => setTimeout(resolve, 3)) : undefined;

/** Writes one entry per key (sequence `seq`) with a producer that follows every resize at once. */
async function writeRound(producer: StreamProducer, keys: number, seq: number) {
  await producer.sendBatch(keyedMessages(keys, 1).map((m) => ({ ...m, payload: { seq } })));
}

async function groupCreatedAfter(streamPrefix: string, produced: number) {
  const recorder = new HandlerRecorder();
  const member = aMember({ streamPrefix, memberId: 'late', runtimeMaxConcurrency: 4, handler: recorder.handler('late', slowOnTheFirstShards) });
  await member.start();
  await pollUntil(`${produced} entries handled`, async () => recorder.distinctEntries() >= produced, { timeoutMs: 30_000 });
  return recorder;
}

describe('a consumer group created after resizes reads every key in order', () => {
  it('after two ordered growths (2 -> 3 -> 4) it crosses both cutovers in turn: no per-key inversion', async () => {
    const streamPrefix = uniqueName('history-grow');
    const admin = new CoordinatorAdmin(redis.client());
    await admin.createStream({ streamPrefix, shardCount: 2 });
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 1 });
    await writeRound(producer, 40, 1);
    await admin.resizeShards(streamPrefix, 3, { graceMs: 0 });
    await writeRound(producer, 40, 2);
    await admin.resizeShards(streamPrefix, 4, { graceMs: 0 });
    await writeRound(producer, 40, 3);

    const recorder = await groupCreatedAfter(streamPrefix, 120);
    expect(recorder.orderViolations()).toEqual([]);
    expect(recorder.distinctEntries()).toBe(120);
    const d = await admin.describeGroup(streamPrefix, 'group');
    expect(d.group.readableShardSet).toEqual([0, 1, 2, 3]);
  }, 40_000);

  it('after a shrink and a growth that adds the removed shards back (4 -> 2 -> 4): no per-key inversion, nothing missed', async () => {
    const streamPrefix = uniqueName('history-shrink');
    const admin = new CoordinatorAdmin(redis.client());
    await admin.createStream({ streamPrefix, shardCount: 4 });
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 1 });
    await writeRound(producer, 40, 1);
    await admin.resizeShards(streamPrefix, 2, { graceMs: 0, switchDelayMs: 0 });
    await writeRound(producer, 40, 2);
    await admin.resizeShards(streamPrefix, 4, { graceMs: 0 });
    await writeRound(producer, 40, 3);

    const recorder = await groupCreatedAfter(streamPrefix, 120);
    expect(recorder.orderViolations()).toEqual([]);
    expect(recorder.distinctEntries()).toBe(120);
  }, 40_000);

  it('describeGroup shows the backlog of shards not yet readable during an ordered growth, and says the cutover is not done', async () => {
    const streamPrefix = uniqueName('describe-grow');
    const admin = new CoordinatorAdmin(redis.client());
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const member = aMember({ streamPrefix, memberId: 'a', shardCount: 2, handler: () => gate });
    await member.start();
    await pollUntil('the group STABLE', async () => (await admin.describeGroup(streamPrefix, 'group')).group.state === 'STABLE');
    try {
      await backlogWhileGrowing(streamPrefix, admin);
    } finally {
      release(); // pass or fail, the member can stop
    }
  }, 20_000);
});

/** 320 entries written while a 2 -> 3 growth waits on old shards nobody can process; what describeGroup says then. */
async function backlogWhileGrowing(streamPrefix: string, admin: CoordinatorAdmin) {
  const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 1 });
  await writeRound(producer, 20, 1);
  // The old shards cannot be processed (the handler waits), so the new shard stays unreadable.
  await admin.resizeShards(streamPrefix, 3, { graceMs: 0 });
  await writeRound(producer, 300, 2);

  const d = await admin.describeGroup(streamPrefix, 'group');
  expect(d.group.readableShardSet).toEqual([0, 1]);
  expect(d.shards.map((s) => [s.shardIndex, s.readability])).toEqual([[0, 'readable'], [1, 'readable'], [2, 'not-yet-readable']]);
  expect(d.shards[2]).toMatchObject({ owner: null, state: 'UNOWNED' });
  expect(d.shards[2].backlog).toBeGreaterThan(0);
  expect(d.group.notYetReadableBacklog).toBe(d.shards[2].backlog);
  expect(d.group.cutoverInProgress).toBe(true);
  // Every entry written is in some shard's backlog: nothing is invisible.
  expect(d.shards.reduce((sum, s) => sum + s.backlog, 0)).toBe(320);
}
