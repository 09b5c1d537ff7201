import { describe, expect, it } from 'vitest';
import {
  compareStreamIds,
  CoordinatorAdmin,
  CoordinatorClient,
  KeyBuilder,
  shardForKey,
  StreamProducer,
  type StreamMessage,
} from '@redis-stream-coordinator/core';
import { ProtocolMember } from '@redis-stream-coordinator/core/testing';
import { parseCutover } from '../../packages/core/src/admin/cutover';
import { CutoverWatch } from '../../packages/core/src/member/lifecycle/cutover-watch';
import { evalsha, scriptShas } from '../reliability/script-match';
import { HandlerRecorder, keyedMessages, type KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const aMember = memberFactory(redis, { coordinator: { heartbeatIntervalMs: 200 }, sessionTimeoutMs: 1000, cutoverCheckIntervalMs: 20 });
const aProxy = proxyFactory(redis);
/** Shards 0 and 1 hold the oldest entries; handling them slowly is what lets a later shard overtake them. */
const slowOnTheFirstShards = (message: StreamMessage<KeyedPayload>) =>
  message.shardIndex < 2 ? new Promise<void>((resolve) => setTimeout(resolve, 3)) : undefined;

/** Writes one entry per key (sequence `seq`) with a producer that follows every resize at once. */
async function writeRound(producer: StreamProducer, keys: number, seq: number) {
  await producer.sendBatch(keyedMessages(keys, 1).map((m) => ({ ...m, payload: { seq } })));
}

async function groupCreatedAfter(streamPrefix: string, produced: number) {
  const recorder = new HandlerRecorder();
  const member = aMember({
    streamPrefix,
    memberId: 'late',
    runtimeMaxConcurrency: 4,
    handler: recorder.handler('late', slowOnTheFirstShards),
  });
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

  // Seen once in the short tier ("late-1: stale-8: 43 after 44 (shard 2, p6)", stale-8 moving from
  // shard 2 to 9 in a 9 -> 10 growth): resizeShards writes the routing markers after the resize, so a
  // producer still routing with the old count can land a moved key on the shard it leaves with an id
  // at or past switchAt. A group created later held every shard from switchAt and waited only up to
  // switchAt - 1, so that entry and the key's next one (on its new shard) were released together,
  // and the new shard's could run first.
  it.each([
    { resize: 'an ordered growth (2 -> 3)', from: 2, to: 3, options: { graceMs: 1000 } },
    {
      resize: 'an ordered shrink switching at once (3 -> 2, switchDelayMs 0)',
      from: 3,
      to: 2,
      options: { graceMs: 1000, switchDelayMs: 0 },
    },
  ])(
    "an entry written with the old count between $resize and its routing markers is handled before the key's entries on its new shard",
    async ({ from, to, options }) => {
      const streamPrefix = uniqueName('history-escape');
      const direct = new CoordinatorAdmin(redis.client());
      await direct.createStream({ streamPrefix, shardCount: from });
      const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 3_600_000 });
      let key = 'key-0';
      for (let i = 1; shardForKey(key, from) === shardForKey(key, to); i++) key = `key-${i}`;
      const [oldShard, newShard] = [shardForKey(key, from), shardForKey(key, to)];
      expect((await producer.send({ key, payload: { seq: 1 } })).shardIndex).toBe(oldShard); // routes with `from` from now on

      const proxy = await aProxy();
      const markers = proxy.holdNextRequest(evalsha(scriptShas('ensureRouting')));
      const resized = new CoordinatorAdmin(redis.clientAt(proxy.url)).resizeShards(streamPrefix, to, options);
      await markers.arrived;
      const switchAt = Number(await redis.client().hget(new KeyBuilder().streamMeta(streamPrefix), 'switchAt'));
      await pollUntil('Redis time past switchAt', async () => (await direct.serverTimeMs()) > switchAt);
      const escaped = await producer.send({ key, payload: { seq: 2 } });
      markers.release();
      await resized;
      const moved = await producer.send({ key, payload: { seq: 3 } });
      // The window this is about: seq 2 on the shard the key leaves, at or past the switch; seq 3 on its new shard.
      expect(escaped.shardIndex).toBe(oldShard);
      expect(compareStreamIds(escaped.id, `${switchAt}-0`)).toBeGreaterThanOrEqual(0);
      expect(moved.shardIndex).toBe(newShard);

      // seq 2 starts only once either seq 3 ran (the order broken) or the group's cutover waits for it
      // (pending on the old shard): whichever the library lets happen first, no timing involved.
      const recorder = new HandlerRecorder();
      const record = recorder.handler('late');
      const handler = async (message: StreamMessage<KeyedPayload>) => {
        if (message.shardIndex === oldShard && message.payload.seq === 2) {
          await pollUntil(
            'seq 3 handled, or the cutover waiting for seq 2',
            async () =>
              recorder.runs.some((r) => r.seq === 3) ||
              (await direct.cutoverStatus(streamPrefix)).some((s) =>
                (s.waitingFor ?? []).some((w) => w.shardIndex === oldShard && w.pending),
              ),
            { timeoutMs: 20_000 },
          );
        }
        await record(message);
      };
      const member = aMember({ streamPrefix, memberId: 'late', runtimeMaxConcurrency: 4, handler });
      await member.start();
      await pollUntil('3 entries handled', async () => recorder.distinctEntries() >= 3, { timeoutMs: 30_000 });
      expect(recorder.runs.map((r) => r.seq)).toEqual([1, 2, 3]);
      expect(recorder.orderViolations()).toEqual([]);
    },
    40_000,
  );

  it('the steps of a later group read the shards keys leave on to `until`: every old shard of a growth, the removed ones of a shrink; capped below the next switch; the default grace for history without `until`', async () => {
    const streamPrefix = uniqueName('history-steps');
    const admin = new CoordinatorAdmin(redis.client());
    await admin.createStream({ streamPrefix, shardCount: 4 });
    // A history as resizeShards records it (Redis ms): 4 -> 6, then 6 -> 3 only 200 ms later (no group
    // held it up), then 3 -> 5 recorded by a version that kept no `until`.
    const history = [
      { version: 2, from: 4, to: 6, switchAt: 1000, until: 1500 },
      { version: 3, from: 6, to: 3, switchAt: 1200, until: 3200 },
      { version: 4, from: 3, to: 5, switchAt: 5000 },
    ];
    await redis
      .client()
      .hset(
        new KeyBuilder().streamMeta(streamPrefix),
        'shardCount',
        5,
        'shardSpan',
        6,
        'metadataVersion',
        4,
        'resizeHistory',
        JSON.stringify(history),
      );
    await new ProtocolMember(new CoordinatorClient(redis.client()), streamPrefix, 'late', 'a').join();

    const groupMeta = new KeyBuilder().groupKey(streamPrefix, 'late').groupMeta;
    const [first, chain] = await redis.client().hmget(groupMeta, 'cutover', 'cutoverChain');
    const steps = [parseCutover(first)!, ...(JSON.parse(chain!) as unknown[]).map((step) => parseCutover(JSON.stringify(step))!)];
    expect(steps.map(({ from, to, switchAt, until, held, late, wait }) => ({ from, to, switchAt, until, held, late, wait }))).toEqual([
      { from: 4, to: 6, switchAt: 1000, until: 1199, held: [0, 1, 2, 3, 4, 5], late: [0, 1, 2, 3], wait: [0, 1, 2, 3, 4, 5] },
      { from: 6, to: 3, switchAt: 1200, until: 3200, held: [0, 1, 2, 3, 4, 5], late: [3, 4, 5], wait: [0, 1, 2, 3, 4, 5] },
      { from: 3, to: 5, switchAt: 5000, until: 7000, held: [0, 1, 2, 3, 4, 5], late: [0, 1, 2], wait: [0, 1, 2, 3, 4, 5] },
    ]);
  });

  it('a group recreated after five resizes crosses its replayed steps without waiting a check interval for each', async () => {
    const streamPrefix = uniqueName('history-fast');
    const admin = new CoordinatorAdmin(redis.client());
    await admin.createStream({ streamPrefix, shardCount: 2 });
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 1 });
    const before = new HandlerRecorder();
    const first = aMember({ streamPrefix, memberId: 'first', handler: before.handler('first') });
    await first.start();
    for (const [i, count] of [3, 4, 5, 6, 7].entries()) {
      await writeRound(producer, 20, i + 1);
      await admin.resizeShards(streamPrefix, count, { graceMs: 0 });
      await pollUntil('the cutover done', async () => (await admin.cutoverStatus(streamPrefix)).every((c) => c.cutover === null));
    }
    await pollUntil('100 entries handled', async () => before.distinctEntries() >= 100);
    await first.stop();

    // The group's keys are lost; a member checking once a minute recreates it. Its five replayed
    // steps are all met already (everything was processed): one check interval each would be five minutes.
    const groupKeys = new KeyBuilder().groupKey(streamPrefix, 'group');
    await redis.client().del(...new KeyBuilder().groupKeys(streamPrefix, 'group').slice(2));
    const after = new HandlerRecorder();
    const member = aMember({ streamPrefix, memberId: 'late', cutoverCheckIntervalMs: 60_000, handler: after.handler('late') });
    await member.start();
    await pollUntil(
      'every replayed step completed',
      async () => (await redis.client().hmget(groupKeys.groupMeta, 'cutover', 'cutoverChain')).every((v) => v === null),
      { timeoutMs: 10_000 },
    );
    await writeRound(producer, 20, 6);
    await pollUntil('the new round handled', async () => after.distinctEntries() >= 20, { timeoutMs: 10_000 });
  }, 40_000);

  it("a member's cutover read that finds the group's keys gone, or the group recreated since the answer, fails and releases nothing it holds", async () => {
    const streamPrefix = uniqueName('history-holds');
    const admin = new CoordinatorAdmin(redis.client());
    const coordinator = new CoordinatorClient(redis.client());
    await admin.createStream({ streamPrefix, shardCount: 3 });
    const joined = await new ProtocolMember(coordinator, streamPrefix, 'g', 'old').join();
    // An ordered shrink: the shards keys move to are held from its switch on.
    await admin.resizeShards(streamPrefix, 2, { graceMs: 60_000 });
    const holds: Map<number, string>[] = [];
    const watch = new CutoverWatch(redis.client(), coordinator, {
      streamPrefix,
      consumerGroup: 'g',
      cutoverCheckIntervalMs: 60_000,
      readTimeoutMs: 2000,
      checkTimeoutMs: 2000,
      setHolds: (h) => holds.push(h),
      setResizeHistory: () => undefined,
      onCheckFailed: () => undefined,
      onCompleted: () => undefined,
    });
    try {
      // The read a heartbeat answer of this life asked for: the holds are set.
      await watch.sync(joined.incarnation);
      expect(holds).toHaveLength(1);
      expect(holds[0].size).toBeGreaterThan(0);
      // The group's keys are lost between an answer and the read it asked for: a read of "no
      // cutover" would release the held entries while a member of the former life still runs.
      const groupKeys = new KeyBuilder().groupKeys(streamPrefix, 'g');
      await redis.client().del(...groupKeys.slice(2));
      await expect(watch.sync(joined.incarnation)).rejects.toThrow(/keys are gone/);
      // Recreated meanwhile: its cutover is not this life's.
      const recreated = await new ProtocolMember(coordinator, streamPrefix, 'g', 'new').join();
      await expect(watch.sync(joined.incarnation)).rejects.toThrow(/recreated/);
      expect(holds).toHaveLength(1);
      // Rejoined, the member reads the new life's cutover (its replayed step holds every shard).
      await watch.sync(recreated.incarnation);
      expect(holds).toHaveLength(2);
      expect([...holds[1].keys()]).toEqual([0, 1, 2]);
    } finally {
      watch.stop();
    }
  });

  it("a group recreated after its keys were lost gets a cutover version of its own: completing its former life's cutover by version completes nothing", async () => {
    const streamPrefix = uniqueName('history-recreated');
    const admin = new CoordinatorAdmin(redis.client());
    const coordinator = new CoordinatorClient(redis.client());
    await admin.createStream({ streamPrefix, shardCount: 2 });
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 1 });
    await writeRound(producer, 10, 1);
    await new ProtocolMember(coordinator, streamPrefix, 'g', 'old').join();
    await admin.resizeShards(streamPrefix, 3, { graceMs: 0 });
    const groupMeta = new KeyBuilder().groupKey(streamPrefix, 'g').groupMeta;
    const former = parseCutover(await redis.client().hget(groupMeta, 'cutover'))!;
    expect(former.replay).toBe(false);

    // The group's coordinator keys are lost (shards and streams kept); a member joins and the group
    // is recreated, replaying the history: its first step waits for every shard up to the switch.
    await redis.client().del(...new KeyBuilder().groupKeys(streamPrefix, 'g').slice(2));
    const joined = await new ProtocolMember(coordinator, streamPrefix, 'g', 'new').join();
    const step = parseCutover(await redis.client().hget(groupMeta, 'cutover'))!;
    expect(step.replay).toBe(true);
    expect(step.version).toBeGreaterThan(former.version);
    expect(joined.metadataVersion).toBe(step.version);

    // A member of the former life, its heartbeat not refused yet, finds that life's cutover ready
    // and completes it by its version: the new group's step must stay (it was 1 of 1 before).
    expect(await coordinator.completeCutover(streamPrefix, 'g', former.version)).toBe(false);
    expect(parseCutover(await redis.client().hget(groupMeta, 'cutover'))?.version).toBe(step.version);
  });

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
  expect(d.shards.map((s) => [s.shardIndex, s.readability])).toEqual([
    [0, 'readable'],
    [1, 'readable'],
    [2, 'not-yet-readable'],
  ]);
  expect(d.shards[2]).toMatchObject({ owner: null, state: 'UNOWNED' });
  expect(d.shards[2].backlog).toBeGreaterThan(0);
  expect(d.group.notYetReadableBacklog).toBe(d.shards[2].backlog);
  expect(d.group.cutoverInProgress).toBe(true);
  // Every entry written is in some shard's backlog: nothing is invisible.
  expect(d.shards.reduce((sum, s) => sum + s.backlog, 0)).toBe(320);
}
