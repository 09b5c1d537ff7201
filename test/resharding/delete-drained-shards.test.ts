import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, type SendResult, StreamProducer } from '@redis-stream-coordinator/core';
import { type CommandVerdict, failing, hookCommands, isScriptOn } from '../support/command-hooks';
import { shardForKey } from '../../packages/core/src/producer/key-hash';
import { HandlerRecorder } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// SPEC 10.5: deleteDrainedShards is several steps (retire the shards in the coordinator's slot, then
// delete each shard's keys in its own slot); each step re-checks what it acts on, a failed call
// called again finishes, and a resize back in between loses nothing.
const redis = useRedisServer();
const aMember = memberFactory(redis, { coordinator: { heartbeatIntervalMs: 200 }, sessionTimeoutMs: 1000, cutoverCheckIntervalMs: 50 });
const keys = new KeyBuilder();

/**
 * A stream of 4 shards read by a running member of "group", shrunk to 2 and drained. With `delayMs`,
 * its 8 entries are sent delayed (released and handled before the shrink); `beforeShrink` runs then.
 */
async function shrunkAndDrained(options: { delayMs?: number; beforeShrink?: (streamPrefix: string) => Promise<void> } = {}) {
  const streamPrefix = uniqueName('delete-drained');
  const admin = new CoordinatorAdmin(redis.client());
  const recorder = new HandlerRecorder();
  const member = aMember({ streamPrefix, memberId: 'a', shardCount: 4, handler: recorder.handler('a') });
  await member.start();
  await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
    Array.from({ length: 8 }, (_, seq) => ({
      shardIndex: seq % 4,
      payload: { key: 'k', seq },
      ...(options.delayMs === undefined ? {} : { delayMs: options.delayMs }),
    })),
  );
  await pollUntil('the first entries handled', async () => recorder.distinctEntries() === 8);
  await options.beforeShrink?.(streamPrefix);
  await admin.resizeShards(streamPrefix, 2, { graceMs: 50, switchDelayMs: 50 });
  await pollUntil('the shrink drained', async () => (await admin.cutoverStatus(streamPrefix)).every((s) => s.cutover === null), {
    timeoutMs: 20_000,
  });
  return { streamPrefix, admin, recorder };
}

/** True for the first command that deletes shard `shard`'s keys (a DEL, or the script that does it). */
const deletes = (streamPrefix: string, shard: number) => (name: string, args: string[]) =>
  args.includes(keys.shardStream(streamPrefix, shard)) && (name === 'del' || isScriptOn(name, args, keys.shardStream(streamPrefix, shard)));

/** A client whose first delete of shard `shard` waits for `act` (another client's writes) before it reaches Redis. */
function racedBeforeDelete(streamPrefix: string, shard: number, act: () => Promise<unknown>) {
  const deleting = redis.client();
  const isDelete = deletes(streamPrefix, shard);
  let raced = false;
  hookCommands(deleting, async (name, args): Promise<CommandVerdict> => {
    if (raced || !isDelete(name, args)) return 'send';
    raced = true;
    await act();
    return 'send';
  });
  return deleting;
}

const removedKeys = (streamPrefix: string) => [
  keys.shardStream(streamPrefix, 2),
  keys.shardStream(streamPrefix, 3),
  keys.shardFence(streamPrefix, 2, 'group'),
  keys.shardFence(streamPrefix, 3, 'group'),
];

describe('deleteDrainedShards (SPEC 10.5)', () => {
  it('a resize back that lands between the retirement and the deletes loses nothing: shards the stream grew back into are not deleted', async () => {
    const { streamPrefix, recorder } = await shrunkAndDrained();
    const deleting = redis.client();
    const isDelete = deletes(streamPrefix, 2);
    let written: SendResult[] = [];
    let raced = false;
    hookCommands(deleting, async (name, args): Promise<CommandVerdict> => {
      if (raced || !isDelete(name, args)) return 'send';
      raced = true;
      // Another operator grows the stream back, and producers write to the regrown shards, all
      // acknowledged, before this call's delete of shard 2 reaches Redis.
      await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 4, { ordered: false });
      written = await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
        Array.from({ length: 40 }, (_, seq) => ({ shardIndex: 2 + (seq % 2), payload: { key: 'regrown', seq } })),
      );
      return 'send';
    });
    await new CoordinatorAdmin(deleting).deleteDrainedShards(streamPrefix);
    expect(raced).toBe(true);
    const kept = new Set<string>();
    for (const shard of [2, 3]) {
      for (const [id] of await redis.client().xrange(keys.shardStream(streamPrefix, shard), '-', '+')) kept.add(`${shard}/${id}`);
    }
    expect(written.filter((w) => !kept.has(`${w.shardIndex}/${w.id}`))).toEqual([]);
    await pollUntil('the 40 writes to the regrown shards handled', async () =>
      written.every((w) => recorder.runs.some((r) => r.shardIndex === w.shardIndex && r.id === w.id)),
    );
  }, 30_000);

  it('a call that failed at its first delete is finished by calling it again: no removed stream or fencing token is left', async () => {
    const { streamPrefix, admin } = await shrunkAndDrained();
    const client = redis.client();
    const firstDelete = failing(deletes(streamPrefix, 2));
    hookCommands(client, firstDelete);
    await expect(new CoordinatorAdmin(client).deleteDrainedShards(streamPrefix)).rejects.toThrow(/connection lost/);
    expect(firstDelete.failed()).toBe(1);

    expect(await admin.deleteDrainedShards(streamPrefix)).toEqual([2, 3]);
    expect(await redis.client().exists(...removedKeys(streamPrefix))).toBe(0);
    expect((await admin.describeStream(streamPrefix))?.shardSpan).toBe(2);
    expect(await admin.deleteDrainedShards(streamPrefix)).toEqual([]);
  }, 30_000);

  it('a call that failed at its last step (ending the retirement) is finished by calling it again, and resizes wait for it', async () => {
    const { streamPrefix, admin } = await shrunkAndDrained();
    const client = redis.client();
    const meta = keys.streamMeta(streamPrefix);
    const lastStep = failing((name, args) => isScriptOn(name, args, meta) && args.includes('deleted'));
    hookCommands(client, lastStep);
    await expect(new CoordinatorAdmin(client).deleteDrainedShards(streamPrefix)).rejects.toThrow(/connection lost/);
    expect(lastStep.failed()).toBe(1);
    expect(await redis.client().exists(...removedKeys(streamPrefix))).toBe(0);
    // The record still stands (resizeShards-n.lua refuses to resize while it does).
    expect(await redis.client().hget(meta, 'retiringSpan')).toBe('4');
    expect(await admin.describeStream(streamPrefix)).toMatchObject({ shardSpan: 2, retiringShards: [2, 3] });

    expect(await admin.deleteDrainedShards(streamPrefix)).toEqual([2, 3]);
    expect(await redis.client().hmget(meta, 'retiringSpan', 'retiredVersion', 'shardSpan')).toEqual([null, null, '2']);
    expect((await admin.describeStream(streamPrefix))?.retiringShards).toBeUndefined();
  }, 30_000);

  it('a resize after a call that failed half way finishes the deletion first, then resizes', async () => {
    const { streamPrefix, admin, recorder } = await shrunkAndDrained();
    const client = redis.client();
    hookCommands(client, failing(deletes(streamPrefix, 3), Number.POSITIVE_INFINITY));
    await expect(new CoordinatorAdmin(client).deleteDrainedShards(streamPrefix)).rejects.toThrow(/connection lost/);

    const grown = await admin.resizeShards(streamPrefix, 4, { ordered: false });
    expect(grown).toMatchObject({ shardCount: 4, changed: true });
    const written = await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
      Array.from({ length: 10 }, (_, seq) => ({ shardIndex: 2 + (seq % 2), payload: { key: 'after', seq } })),
    );
    await pollUntil('the writes to the regrown shards handled', async () =>
      written.every((w) => recorder.runs.some((r) => r.shardIndex === w.shardIndex && r.id === w.id)),
    );
    // Only the new entries are there: the old streams were deleted before the stream grew back.
    expect(await redis.client().xlen(keys.shardStream(streamPrefix, 3))).toBe(5);
  }, 30_000);

  it('re-checks each shard in its own slot right before deleting it: an entry that arrived since the look is not deleted', async () => {
    const { streamPrefix } = await shrunkAndDrained();
    const deleting = redis.client();
    const isDelete = deletes(streamPrefix, 2);
    let late = '';
    hookCommands(deleting, async (name, args): Promise<CommandVerdict> => {
      if (late !== '' || !isDelete(name, args)) return 'send';
      // A writer that bypasses the routing markers adds an entry after the drain was checked.
      late = String(await redis.client().xadd(keys.shardStream(streamPrefix, 2), '*', 'p', '{"seq":99}'));
      return 'send';
    });
    await expect(new CoordinatorAdmin(deleting).deleteDrainedShards(streamPrefix)).rejects.toThrow(
      /shard 2 still holds 1 entry group group has not processed/,
    );
    expect((await redis.client().xrange(keys.shardStream(streamPrefix, 2), '-', '+')).map(([id]) => id)).toContain(late);
    // Back in the span, where describeGroup shows its backlog, and the stream can still be resized.
    expect((await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group')).shards[2]).toMatchObject({ backlog: 1 });
    expect(await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 3, { ordered: false })).toMatchObject({ shardCount: 3 });
  }, 30_000);

  it("re-checks each shard's schedules right before deleting it: a deferred retry written since the look is not deleted", async () => {
    const { streamPrefix } = await shrunkAndDrained();
    const deferred = keys.shardDeferred(streamPrefix, 2, 'group');
    // A deferral lands on the shard after the look (written by hand: no member holds it any more).
    const deleting = racedBeforeDelete(streamPrefix, 2, async () => {
      await redis.client().zadd(deferred, Date.now() + 60_000, 'd0000000000000001');
      await redis.client().hset(`${deferred}:entries`, 'd0000000000000001', 'x');
    });
    await expect(new CoordinatorAdmin(deleting).deleteDrainedShards(streamPrefix)).rejects.toThrow(
      /shard 2 still holds 0 delayed entries and 1 deferred retry of group group not released/,
    );
    expect(await redis.client().zcard(deferred)).toBe(1);
    expect(await redis.client().exists(keys.shardStream(streamPrefix, 2))).toBe(1);
    // Back in the span: the stream can still be resized.
    expect(await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 3, { ordered: false })).toMatchObject({ shardCount: 3 });
  }, 30_000);

  it("re-checks the shard's own schedule too: a delayed entry waiting to move there since the look is not deleted", async () => {
    const { streamPrefix } = await shrunkAndDrained();
    const schedule = keys.shardSchedule(streamPrefix, 2);
    // An entry waiting to move (a score at or below 0, its move number's) lands after the look, by hand.
    const deleting = racedBeforeDelete(streamPrefix, 2, async () => {
      await redis.client().zadd(schedule, -1000, 's0000000000000009');
      await redis.client().hset(keys.shardScheduledEntries(streamPrefix, 2), 's0000000000000009', 'x');
    });
    await expect(new CoordinatorAdmin(deleting).deleteDrainedShards(streamPrefix)).rejects.toThrow(
      /shard 2 still holds 1 delayed entry and 0 deferred retries not released/,
    );
    expect(await redis.client().zrange(schedule, '0', '-1')).toEqual(['s0000000000000009']);
    expect(await redis.client().hexists(keys.shardScheduledEntries(streamPrefix, 2), 's0000000000000009')).toBe(1);
    expect(await redis.client().exists(keys.shardStream(streamPrefix, 2))).toBe(1);
  }, 30_000);

  it('does not delete a retired shard whose routing marker lets writes in; it goes back into the span', async () => {
    const { streamPrefix } = await shrunkAndDrained();
    const marker = keys.shardRouting(streamPrefix, 3);
    // Something rewrote the marker (same resize version) so that it lets writes in.
    const deleting = racedBeforeDelete(streamPrefix, 3, () => redis.client().hset(marker, 'count', 4, 'previous', 4));
    await expect(new CoordinatorAdmin(deleting).deleteDrainedShards(streamPrefix)).rejects.toThrow(
      /removed shard 3's routing marker lets writes in \(count 4\); it is not deleted/,
    );
    expect(await redis.client().exists(keys.shardStream(streamPrefix, 3))).toBe(1);
    expect(await redis.client().exists(keys.shardStream(streamPrefix, 2))).toBe(0);
    const stream = await new CoordinatorAdmin(redis.client()).describeStream(streamPrefix);
    expect(stream).toMatchObject({ shardSpan: 4 });
    expect(stream?.retiringShards).toBeUndefined();
  }, 30_000);

  it('a reset of the offsets after the shrink completed moves only the shards the group reads: the drained ones stay deletable', async () => {
    // The soak of 424aa44: a reset to earliest moved the group back on every shard up to shardSpan,
    // removed ones included, which no member reads once the shrink completed: their entries were
    // never read again and deleteDrainedShards was refused for good ("still holds N entries").
    const { streamPrefix, admin, recorder } = await shrunkAndDrained();
    const result = await admin.resetOffsets(streamPrefix, 'group', { to: 'earliest', force: true });
    expect(result.shards.map((s) => s.shardIndex)).toEqual([0, 1]);
    await expect(admin.resetOffsets(streamPrefix, 'group', { to: 'earliest', force: true, shardIndex: 2 })).rejects.toThrow(
      /shardIndex 2 was removed by a shrink .* drained it/,
    );
    await pollUntil('the surviving shards read again', async () => recorder.runs.length >= 8 + 4);
    expect(await admin.deleteDrainedShards(streamPrefix)).toEqual([2, 3]);
  }, 30_000);

  it("deletes every key of a drained shard: its schedule's and the groups' deferred schedules' hashes and key states too", async () => {
    const client = redis.client();
    // Its entries sent delayed: the schedules' hashes keep the last schedule id given.
    const { streamPrefix, admin } = await shrunkAndDrained({
      delayMs: 50,
      // What a deferred retry of the group leaves on a shard once released and handled: its deferral
      // sequence and its key's state (nothing counted, its barrier kept until a release call sweeps it).
      beforeShrink: async (prefix) => {
        for (const shard of [2, 3]) {
          await client.hset(keys.shardDeferredEntries(prefix, shard, 'group'), '#seq', '1');
          await client.hset(keys.shardDeferredKeys(prefix, shard, 'group'), 'kk', '0|0|0|1-0|1-0|1-0', '#cursor', '0');
        }
      },
    });
    expect(await admin.deleteDrainedShards(streamPrefix)).toEqual([2, 3]);
    for (const shard of [2, 3]) {
      const left = await client.keys(`${keys.shardStream(streamPrefix, shard)}*`);
      // Kept by design: the routing marker refuses late writes (and a moves-taken log, when moves
      // landed there); a producer's write log expires on its own (its name is the producer's).
      const writeLogs = left.filter((key) => key.includes(':writes:'));
      for (const log of writeLogs) expect(await client.pttl(log)).toBeGreaterThan(0);
      // And each group's last deferral id, alone in its hash: a shard grown back goes on after it.
      const deferralIds = keys.shardDeferredEntries(streamPrefix, shard, 'group');
      expect(await client.hgetall(deferralIds)).toEqual({ '#seq': '1' });
      expect(
        left.filter((key) => !key.endsWith(':routing') && !key.endsWith(':moves-taken') && key !== deferralIds && !writeLogs.includes(key)),
      ).toEqual([]);
    }
  }, 30_000);
  it("a shard deleted and grown back moves its delayed entries again at the next shrink: its move numbers start above those its keys' shards took", async () => {
    const streamPrefix = uniqueName('delete-drained-moves');
    const admin = new CoordinatorAdmin(redis.client());
    const client = redis.client();
    const member = aMember({ streamPrefix, memberId: 'a', shardCount: 4, handler: new HandlerRecorder().handler('a') });
    await member.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    // Keys of shard 3 (under 4 shards), sent delayed far ahead: a shrink moves them to their key's
    // surviving shard before they are due, each move taken once by its number (acceptMove-5.lua).
    const onShard3 = Array.from({ length: 200 }, (_, i) => `moved-${i}`)
      .filter((key) => shardForKey(key, 4) === 3)
      .slice(0, 3);
    const sendDelayed = (round: number) =>
      producer.sendBatch(onShard3.map((key, i) => ({ key, payload: { key, seq: round * 10 + i }, delayMs: 600_000 })));
    const shrink = async () => {
      await admin.resizeShards(streamPrefix, 2, { graceMs: 50, switchDelayMs: 50 });
      await pollUntil('the shrink drained', async () => (await admin.cutoverStatus(streamPrefix)).every((s) => s.cutover === null), {
        timeoutMs: 20_000,
      });
    };
    const scheduled = async () => {
      const counts: number[] = [];
      for (let shard = 0; shard < 4; shard++) counts.push(await client.zcard(keys.shardSchedule(streamPrefix, shard)));
      return counts;
    };
    await sendDelayed(0);
    await shrink();
    expect((await scheduled())[3]).toBe(0);
    // The deletion takes the schedule's hash with its last move number.
    expect(await admin.deleteDrainedShards(streamPrefix)).toEqual([2, 3]);
    expect(await client.exists(keys.shardScheduledEntries(streamPrefix, 3))).toBe(0);
    await admin.resizeShards(streamPrefix, 4, { ordered: false });
    await sendDelayed(1);
    expect((await scheduled())[3]).toBe(3);
    await shrink();
    // Were its numbers to start again from 1, its keys' shards would answer its moves 'taken' and
    // they would be dropped from its schedule unwritten.
    const counts = await scheduled();
    expect(counts[3]).toBe(0);
    expect(counts.reduce((a, b) => a + b, 0)).toBe(6);
  }, 60_000);
  it('a shard deleted and grown back never gives a schedule id again: a drop by an id send answered before drops nothing of the new entries', async () => {
    const client = redis.client();
    // Its 8 entries sent delayed: shard 2's were s0000000000000001 and s0000000000000002, released and handled.
    const { streamPrefix, admin } = await shrunkAndDrained({ delayMs: 50 });
    expect(await admin.deleteDrainedShards(streamPrefix)).toEqual([2, 3]);
    await admin.resizeShards(streamPrefix, 4, { ordered: false });
    const sent = await new StreamProducer(redis.client(), { streamPrefix }).send({
      shardIndex: 2,
      payload: { key: 'later', seq: 1 },
      delayMs: 600_000,
    });
    expect(Number(sent.id.slice(1))).toBeGreaterThan(2);
    // A caller cancelling an entry it sent before the deletion (by the id send answered) drops nothing now.
    expect(await admin.dropScheduled({ streamPrefix, shardIndex: 2 }, 's0000000000000001')).toMatchObject({ dropped: false });
    expect(await client.zrange(keys.shardSchedule(streamPrefix, 2), '0', '-1')).toEqual([sent.id]);
  }, 30_000);
});
