import { afterEach, describe, expect, it } from 'vitest';
import {
  CoordinatorAdmin,
  KeyBuilder,
  StreamProducer,
  type StreamMessage,
  type TrimRun,
  type TrimSchedule,
} from '@redis-stream-coordinator/core';
import { type CommandVerdict, hookCommands, isScriptOn } from '../support/command-hooks';
import type { KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// Retention tied to the slowest group (SPEC 10.6, docs/operations.md, Retention). Groups are driven by hand (XREADGROUP, XACK)
// so that each sits exactly where the test puts it.
const redis = useRedisServer();
const keys = new KeyBuilder();
const admin = () => new CoordinatorAdmin(redis.client());
const aMember = memberFactory(redis);

async function aStream(shardCount: number, groups: string[], entriesPerShard: number) {
  const streamPrefix = uniqueName('retention');
  await admin().createStream({ streamPrefix, shardCount });
  // Registered as the coordinator does when a member joins.
  if (groups.length > 0) await redis.client().sadd(keys.streamGroups(streamPrefix), ...groups);
  const producer = new StreamProducer(redis.client(), { streamPrefix });
  const ids: string[][] = [];
  for (let shardIndex = 0; shardIndex < shardCount; shardIndex++) {
    ids.push(
      (await producer.sendBatch(Array.from({ length: entriesPerShard }, (_, seq) => ({ shardIndex, payload: { seq } })))).map((r) => r.id),
    );
  }
  return { streamPrefix, ids };
}

/** The group reads `read` entries of the shard and acknowledges the first `acked` of them. */
async function consume(streamPrefix: string, shardIndex: number, group: string, read: number, acked: number) {
  const stream = keys.shardStream(streamPrefix, shardIndex);
  await redis
    .client()
    .xgroup('CREATE', stream, group, '0', 'MKSTREAM')
    .catch(() => undefined);
  const reply = (await redis.client().xreadgroup('GROUP', group, 'c', 'COUNT', read, 'STREAMS', stream, '>')) as [
    string,
    [string, string[]][],
  ][];
  const got = reply[0][1].map(([id]) => id);
  if (acked > 0) await redis.client().xack(stream, group, ...got.slice(0, acked));
}

const remaining = async (streamPrefix: string, shardIndex: number) =>
  (await redis.client().xrange(keys.shardStream(streamPrefix, shardIndex), '-', '+')).map(([id]) => id);

describe('trim', () => {
  it("trims each shard up to the slowest group's delivered-and-acknowledged position, never past a pending entry", async () => {
    const { streamPrefix, ids } = await aStream(3, ['fast', 'slow', 'stuck'], 10);
    // Shard 0: fast read and acked 8, slow 5, stuck read 6 but acked only 2 (pending from the 3rd).
    await consume(streamPrefix, 0, 'fast', 8, 8);
    await consume(streamPrefix, 0, 'slow', 5, 5);
    await consume(streamPrefix, 0, 'stuck', 6, 2);
    // Shard 1: everyone read and acked everything.
    for (const group of ['fast', 'slow', 'stuck']) await consume(streamPrefix, 1, group, 10, 10);
    // Shard 2: stuck never read it (no Redis group there yet): left alone.
    await consume(streamPrefix, 2, 'fast', 10, 10);
    await consume(streamPrefix, 2, 'slow', 10, 10);

    const dry = await admin().trim(streamPrefix, { dryRun: true });
    expect(dry.shards).toEqual([
      { shardIndex: 0, trimmed: 2, minId: ids[0][2], limitedBy: 'stuck' },
      { shardIndex: 1, trimmed: 10, minId: '', limitedBy: 'fast' },
      { shardIndex: 2, trimmed: 0, leftAlone: 'group stuck has not read this shard yet' },
    ]);
    expect(await remaining(streamPrefix, 0)).toEqual(ids[0]); // a dry run deletes nothing

    const result = await admin().trim(streamPrefix);
    expect(result).toMatchObject({ dryRun: false, groups: ['fast', 'slow', 'stuck'], trimmed: 12 });
    expect(result.shards).toEqual(dry.shards);
    expect(await remaining(streamPrefix, 0)).toEqual(ids[0].slice(2));
    expect(await remaining(streamPrefix, 1)).toEqual([]);
    expect(await remaining(streamPrefix, 2)).toEqual(ids[2]);
    // The pending entries are still there for stuck to acknowledge, and its group still works.
    const pending = (await redis.client().xpending(keys.shardStream(streamPrefix, 0), 'stuck', '-', '+', 10)) as [string][];
    expect(pending.map(([id]) => id)).toEqual(ids[0].slice(2, 6));

    // Once stuck acknowledges, slow (read 5) limits; trimming again is safe and deletes only the new part.
    await redis.client().xack(keys.shardStream(streamPrefix, 0), 'stuck', ...ids[0].slice(2, 6));
    const again = await admin().trim(streamPrefix);
    expect(again.shards[0]).toEqual({ shardIndex: 0, trimmed: 3, minId: ids[0][5], limitedBy: 'slow' });
    expect(await remaining(streamPrefix, 0)).toEqual(ids[0].slice(5));
    expect((await admin().trim(streamPrefix)).trimmed).toBe(0);
  });

  it('never deletes an entry a group has not been delivered, even with nothing pending', async () => {
    const { streamPrefix, ids } = await aStream(1, ['reader'], 5);
    await redis.client().xgroup('CREATE', keys.shardStream(streamPrefix, 0), 'reader', '0');
    expect((await admin().trim(streamPrefix)).shards).toEqual([{ shardIndex: 0, trimmed: 0, minId: ids[0][0], limitedBy: 'reader' }]);
    expect(await remaining(streamPrefix, 0)).toEqual(ids[0]);
  });

  it("keeps what a reset asked to re-read: the lower of every group's last-delivered id and oldest pending entry (SPEC 10.6)", async () => {
    const { streamPrefix, ids } = await aStream(1, ['group'], 105);
    // A member had acknowledged 100 entries and crashed with the last 5 pending; the group is then
    // reset to the earliest entry (forced: the crashed member's lease may still be live).
    await consume(streamPrefix, 0, 'group', 105, 100);
    await admin().resetOffsets(streamPrefix, 'group', { to: 'earliest', force: true });

    const dry = await admin().trim(streamPrefix, { dryRun: true });
    expect(dry.shards).toEqual([{ shardIndex: 0, trimmed: 0, minId: ids[0][0], limitedBy: 'group' }]);
    expect((await admin().trim(streamPrefix)).trimmed).toBe(0);
    // The next member reads all 105 again, as the reset asked.
    const reread = (await redis
      .client()
      .xreadgroup('GROUP', 'group', 'next', 'COUNT', 1000, 'STREAMS', keys.shardStream(streamPrefix, 0), '>')) as [
      string,
      [string, string[]][],
    ][];
    expect(reread[0][1].map(([id]) => id)).toEqual(ids[0]);

    // A reset to an id between the acknowledged and the pending entries keeps from that id on.
    await admin().resetOffsets(streamPrefix, 'group', { to: { id: ids[0][49] }, force: true });
    await redis.client().xack(keys.shardStream(streamPrefix, 0), 'group', ...ids[0]);
    const afterAck = await admin().trim(streamPrefix);
    expect(afterAck.shards[0]).toEqual({ shardIndex: 0, trimmed: 50, minId: ids[0][50], limitedBy: 'group' });
  });

  it('counts a Redis consumer group on a shard that the coordinator does not know (another reader)', async () => {
    const { streamPrefix, ids } = await aStream(1, ['registered'], 4);
    await consume(streamPrefix, 0, 'registered', 4, 4);
    await consume(streamPrefix, 0, 'outsider', 1, 1);
    expect((await admin().trim(streamPrefix)).shards[0]).toEqual({ shardIndex: 0, trimmed: 1, minId: ids[0][1], limitedBy: 'outsider' });
  });

  it('leaves a stream no group reads alone, unless a maxLen is given', async () => {
    const { streamPrefix, ids } = await aStream(2, [], 5);
    const untouched = await admin().trim(streamPrefix);
    expect(untouched.shards.map((s) => s.leftAlone)).toEqual([
      'no consumer group reads it and no maxLen was given',
      'no consumer group reads it and no maxLen was given',
    ]);
    expect(await admin().trim(streamPrefix, { maxLen: 2, dryRun: true })).toMatchObject({ trimmed: 6 });
    expect(await remaining(streamPrefix, 1)).toEqual(ids[1]);
    expect(await admin().trim(streamPrefix, { maxLen: 2 })).toMatchObject({
      trimmed: 6,
      shards: [
        { shardIndex: 0, trimmed: 3 },
        { shardIndex: 1, trimmed: 3 },
      ],
    });
    expect(await remaining(streamPrefix, 1)).toEqual(ids[1].slice(3));
  });

  it('refuses bad options and a stream without metadata, naming them', async () => {
    await expect(admin().trim('no-such-stream')).rejects.toThrow(/stream "no-such-stream" does not exist/);
    const { streamPrefix } = await aStream(1, [], 1);
    await expect(admin().trim(streamPrefix, { maxLen: 0 })).rejects.toThrow(/maxLen must be an integer from 1 to \d+, got 0/);
  });

  it('reports a shard that cannot be trimmed and trims the others (TrimError)', async () => {
    const { streamPrefix } = await aStream(2, ['g'], 3);
    await consume(streamPrefix, 1, 'g', 3, 3);
    await redis.client().del(keys.shardStream(streamPrefix, 0));
    await redis.client().set(keys.shardStream(streamPrefix, 0), 'not a stream');
    const error = await admin()
      .trim(streamPrefix)
      .then(
        () => undefined,
        (e: unknown) => e as { name: string; message: string; result: { shards: unknown[] } },
      );
    expect(error?.name).toBe('TrimError');
    expect(error?.message).toMatch(/trimming 1 shard\(s\) failed \(first: shard 0: .*WRONGTYPE/);
    expect(error?.result.shards[1]).toEqual({ shardIndex: 1, trimmed: 3, minId: '', limitedBy: 'g' });
  });
});

describe('startTrimming', () => {
  const aProxy = proxyFactory(redis);
  const schedules: TrimSchedule[] = [];
  afterEach(async () => {
    await Promise.all(schedules.splice(0).map((s) => s.stop()));
  });
  function track(schedule: TrimSchedule) {
    schedules.push(schedule);
    const runs: TrimRun[] = [];
    const errors: Error[] = [];
    schedule.on('trimmed', (run) => runs.push(run));
    schedule.on('error', (error) => errors.push(error));
    return { runs, errors };
  }

  it('trims at once and then after each interval what every group has acknowledged since, one run at a time', async () => {
    const { streamPrefix, ids } = await aStream(1, ['g'], 6);
    await consume(streamPrefix, 0, 'g', 3, 3);
    const schedule = admin().startTrimming(streamPrefix, { intervalMs: 100 });
    const { runs, errors } = track(schedule);
    await pollUntil('the first three entries trimmed', async () => (await remaining(streamPrefix, 0)).length === 3);
    expect(await remaining(streamPrefix, 0)).toEqual(ids[0].slice(3));

    await consume(streamPrefix, 0, 'g', 3, 3);
    await pollUntil('the rest trimmed by a later run', async () => (await remaining(streamPrefix, 0)).length === 0);
    await pollUntil('its run reported', async () => schedule.stats().trimmed === 6);
    await schedule.stop();

    expect(errors).toEqual([]);
    expect(runs.length).toBeGreaterThanOrEqual(2);
    for (let i = 1; i < runs.length; i++) expect(runs[i].startedAt).toBeGreaterThanOrEqual(runs[i - 1].finishedAt);
    expect(schedule.stats()).toMatchObject({
      streamPrefix,
      stopped: true,
      running: false,
      failed: 0,
      consecutiveFailures: 0,
      trimmed: 6,
      succeeded: runs.length,
    });
  });

  it('reports each failed run and goes on: a stream without metadata fails until it is created', async () => {
    const streamPrefix = uniqueName('retention-late');
    const schedule = admin().startTrimming(streamPrefix, { intervalMs: 100, maxLen: 2 });
    const { runs, errors } = track(schedule);
    await pollUntil('two failed runs', async () => schedule.stats().consecutiveFailures >= 2);
    expect(errors[0].message).toMatch(/nothing to trim: stream ".*" does not exist \(it has no metadata\)/);
    expect(schedule.stats().lastError).toBe(errors.at(-1));

    // No group: maxLen applies.
    await admin().createStream({ streamPrefix, shardCount: 1 });
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
      Array.from({ length: 5 }, (_, seq) => ({ shardIndex: 0, payload: { seq } })),
    );
    await pollUntil('a run succeeded after the failures', async () => runs.some((r) => r.result.trimmed === 3));
    expect(schedule.stats().consecutiveFailures).toBe(0);
    expect((await remaining(streamPrefix, 0)).length).toBe(2);
  });

  it('a run held by a late Redis reply is reported as overdue; the next waits for it, and stop() waits no longer than its deadline', async () => {
    const { streamPrefix } = await aStream(1, ['g'], 2);
    await consume(streamPrefix, 0, 'g', 2, 2);
    const proxy = await aProxy();
    proxy.delay('reply', 60_000);
    const viaProxy = new CoordinatorAdmin(redis.clientAt(proxy.url));
    const schedule = viaProxy.startTrimming(streamPrefix, { intervalMs: 100, runTimeoutMs: 300 });
    const { runs, errors } = track(schedule);
    await pollUntil('the overdue run reported', async () => errors.length === 1);
    expect(errors[0].message).toMatch(
      /the run started 300 ms ago has not finished \(a Redis reply late or lost\); the next run waits for it/,
    );
    expect(schedule.stats()).toMatchObject({ runs: 1, running: true, overdue: true });

    proxy.delay('reply', 0);
    await pollUntil('the late run finished and a next one ran', async () => runs.length >= 2);
    expect(runs[1].startedAt).toBeGreaterThanOrEqual(runs[0].finishedAt);
    expect(runs[0].result.trimmed).toBe(2);

    // stop() while a run hangs: resolves at the run's deadline, not when Redis answers.
    proxy.delay('reply', 60_000);
    await pollUntil('a run is hanging', async () => schedule.stats().running && schedule.stats().overdue);
    let stopped = false;
    void schedule.stop().then(() => {
      stopped = true;
    });
    await pollUntil('stop() resolved', async () => stopped, { timeoutMs: 5000 });
    expect(schedule.stats().stopped).toBe(true);
    proxy.delay('reply', 0);
  });

  it('refuses bad options, naming them', () => {
    expect(() => admin().startTrimming('s', { intervalMs: 10 })).toThrow('intervalMs must be an integer from 100 to 86400000, got 10');
    expect(() => admin().startTrimming('s', { intervalMs: 1000, maxLen: 0 })).toThrow('maxLen must be an integer from 1 to');
    expect(() => admin().startTrimming('s', { intervalMs: 1000, runTimeoutMs: 5 })).toThrow(
      'runTimeoutMs must be an integer from 100 to 86400000, got 5',
    );
    expect(() => admin().startTrimming('a:b', { intervalMs: 1000 })).toThrow('streamPrefix "a:b" is invalid');
    expect(() => admin().startTrimming('s', undefined as never)).toThrow('startTrimming options must be an object with intervalMs');
  });
});

describe('a group that registers while trim runs (SPEC 10.5, 10.6)', () => {
  it('keeps every entry written before the group registered: its consumer group is on every shard stream before it is registered', async () => {
    const streamPrefix = uniqueName('trimrace');
    await admin().createStream({ streamPrefix, shardCount: 1 });
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
      Array.from({ length: 10 }, (_, seq) => ({ shardIndex: 0, payload: { seq } })),
    );
    const adminClient = redis.client();
    let endTrim!: () => void;
    const trimDone = new Promise<void>((resolve) => (endTrim = resolve));
    const handled: number[] = [];
    let member: ReturnType<typeof aMember> | undefined;
    // Between trim's read of the registered groups and shard 0's script, group "late" joins (and is
    // registered); its claim of shard 0 (claimShard-2.lua, which would create its consumer group)
    // waits until trim is done.
    hookCommands(adminClient, async (name, args): Promise<CommandVerdict> => {
      if (isScriptOn(name, args, keys.shardStream(streamPrefix, 0)) && !member) {
        const memberClient = redis.client();
        hookCommands(memberClient, async (n, a): Promise<CommandVerdict> => {
          if (isScriptOn(n, a, keys.shardFence(streamPrefix, 0, 'late'))) await trimDone;
          return 'send';
        });
        member = aMember(
          { streamPrefix, consumerGroup: 'late', handler: async (m: StreamMessage<KeyedPayload>) => void handled.push(m.payload.seq) },
          memberClient,
        );
        void member.start();
        await pollUntil('"late" registered', async () => (await redis.client().smembers(keys.streamGroups(streamPrefix))).includes('late'));
      }
      return 'send';
    });
    const result = await new CoordinatorAdmin(adminClient).trim(streamPrefix, { maxLen: 2 });
    endTrim();
    expect(result.trimmed).toBe(0);
    await pollUntil('"late" handled all 10', async () => handled.length >= 10);
    expect(handled.sort((a, b) => a - b)).toEqual(Array.from({ length: 10 }, (_, seq) => seq));
    await member?.stop();
  });
});
