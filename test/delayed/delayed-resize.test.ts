import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import { shardForKey } from '../../packages/core/src/producer/key-hash';
import { fenceToken, settledMove, ShardClient } from '../../packages/core/src/redis/shard-client';
import { hookCommands, isScriptOn } from '../support/command-hooks';
import type { KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';
import { recorder } from './resize-fixtures';

// docs/runtime.md, Delayed delivery ("Resharding"): a delayed entry takes its place in its key's
// order when it is due, so it enters the stream of the shard its key routes to then, whatever the
// shard count was when it was sent. It moves in two steps in two slots (acceptMove-5.lua on the
// key's shard, then its removal by the source's next releaseDue-8.lua call): nothing lost and
// nothing written twice, whichever step a member dies after.

const redis = useRedisServer();
const BLOCK_MS = 300;
const aMember = memberFactory(redis, { blockMs: BLOCK_MS });
const keys = new KeyBuilder();

/** `count` keys that `from` shards route to an old shard and `to` shards to another (moved), or to the same (staying). */
function keysThat(kind: 'move' | 'stay', from: number, to: number, count: number): string[] {
  const found: string[] = [];
  for (let i = 0; found.length < count; i++) {
    const key = `key-${i}`;
    const moves = shardForKey(key, from) !== shardForKey(key, to);
    if (moves === (kind === 'move')) found.push(key);
  }
  return found;
}

async function aStream(shardCount: number, label: string): Promise<string> {
  const streamPrefix = uniqueName(label);
  await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount });
  return streamPrefix;
}

/** What every shard's schedule and stream hold, as stored. */
async function storedEntries(streamPrefix: string, shardCount: number) {
  const client = redis.client();
  let scheduled = 0;
  const streams: { key: string; seq: number; shardIndex: number }[] = [];
  for (let shardIndex = 0; shardIndex < shardCount; shardIndex++) {
    scheduled += await client.zcard(keys.shardSchedule(streamPrefix, shardIndex));
    for (const [, fields] of await client.xrange(keys.shardStream(streamPrefix, shardIndex), '-', '+')) {
      const seq = (JSON.parse(fields[fields.indexOf('p') + 1]) as KeyedPayload).seq;
      streams.push({ key: fields[fields.indexOf('k') + 1], seq, shardIndex });
    }
  }
  return { scheduled, streams };
}

/** The shard's fencing token set to a protocol-level owner's (no member holds the shard meanwhile). */
async function ownedBy(streamPrefix: string, shardIndex: number, memberId: string, group = 'group'): Promise<ShardClient> {
  await redis.client().set(keys.shardFence(streamPrefix, shardIndex, group), fenceToken('0', 1, memberId));
  return new ShardClient(redis.client(), keys, streamPrefix, group, memberId);
}

/** Redis' clock, in ms. */
async function redisNow(): Promise<number> {
  const [seconds, micros] = await redis.client().time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

/** The payload seqs in a shard's stream, in stream order. */
async function streamSeqs(streamPrefix: string, shardIndex: number): Promise<number[]> {
  const entries = await redis.client().xrange(keys.shardStream(streamPrefix, shardIndex), '-', '+');
  return entries.map(([, fields]) => (JSON.parse(fields[fields.indexOf('p') + 1]) as KeyedPayload).seq);
}

/**
 * A member (of `group`) that comes to own all `shards` of the stream and whose release calls on
 * `schedule` fail, as a slow or absent owner's would, until `slow.releasesFrom` (epoch ms) is set.
 * Only the release calls (releaseDue-8.lua, eight keys): the read-only look at the schedule that
 * the shards it gave keys to take (scheduleBound-2.lua) goes through, so what holds them is what it
 * reads, not a failed call.
 */
async function slowReleaser(streamPrefix: string, schedule: string, shards: number, group?: string) {
  const slow = { releasesFrom: Number.POSITIVE_INFINITY };
  const connection = redis.client();
  hookCommands(connection, (name, args) =>
    isScriptOn(name, args, schedule) && args[1] === '8' && Date.now() < slow.releasesFrom ? new Error('connection lost') : 'send',
  );
  const recorded = recorder();
  const member = aMember(
    {
      streamPrefix,
      handler: recorded.handler,
      cutoverCheckIntervalMs: 50,
      sessionTimeoutMs: 3000,
      ...(group ? { consumerGroup: group } : {}),
    },
    connection,
  );
  await member.start();
  await pollUntil('every shard owned', async () => member.ownedShards().length === shards, { timeoutMs: 10_000 });
  return { slow, recorded, member };
}

/**
 * Delayed entries of moved and staying keys sent before a growth 2 -> 4, due inside its cutover
 * (graceMs 2000: the new shards are held until the old ones are processed past it), with entries of
 * each key before the growth (0), after it and before the due time (1) and after the due time (3).
 */
async function growthCase(ordered: boolean): Promise<void> {
  const streamPrefix = await aStream(2, ordered ? 'delayed-grow' : 'delayed-grow-unordered');
  const recorded = recorder();
  const member = aMember({ streamPrefix, handler: recorded.handler, cutoverCheckIntervalMs: 50 });
  await member.start();
  await pollUntil('both shards owned', async () => member.ownedShards().length === 2);
  const moved = keysThat('move', 2, 4, 4);
  const staying = keysThat('stay', 2, 4, 2);
  const all = [...moved, ...staying];
  const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 100 });
  await producer.sendBatch(all.map((key) => ({ key, payload: { seq: 0 } })));
  await producer.sendBatch(all.map((key) => ({ key, payload: { seq: 2 }, delayMs: 1500 })));
  await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 4, { ordered, graceMs: 2000 });
  await producer.sendBatch(all.map((key) => ({ key, payload: { seq: 1 } }))); // after the growth, before the due time
  await pollUntil('every delayed entry handled', async () => recorded.seen.filter((s) => s.seq === 2).length === all.length, {
    timeoutMs: 20_000,
  });
  await producer.sendBatch(all.map((key) => ({ key, payload: { seq: 3 } }))); // after the due time
  await pollUntil('everything handled', async () => recorded.seen.length === all.length * 4, { timeoutMs: 20_000 });
  for (const key of all) {
    // Unordered, the key's entry on its old shard (0) may run after those on its new one.
    const seqs = ordered ? recorded.seqsOf(key) : recorded.seqsOf(key).filter((seq) => seq !== 0);
    expect(seqs, key).toEqual(ordered ? [0, 1, 2, 3] : [1, 2, 3]);
    const delayed = recorded.seen.find((s) => s.key === key && s.seq === 2);
    expect(delayed?.shardIndex, `${key}'s delayed entry`).toBe(shardForKey(key, 4));
  }
  const { scheduled, streams } = await storedEntries(streamPrefix, 4);
  expect(scheduled).toBe(0);
  expect(streams).toHaveLength(all.length * 4); // each written once
}

describe('delayed entries across a resize', () => {
  it("ordered growth: a delayed entry due after it, during the cutover, enters the shard its key routes to then, in its key's order", () =>
    growthCase(true));

  it("unordered growth: a delayed entry due after it enters the shard its key routes to then, in its key's order", () => growthCase(false));

  it("keyed shrink: a removed shard's delayed entry moves to its key's surviving shard before it is due, so the drain does not wait for it", async () => {
    const streamPrefix = await aStream(2, 'delayed-shrink-keyed');
    const recorded = recorder();
    const member = aMember({ streamPrefix, handler: recorded.handler, cutoverCheckIntervalMs: 50, sessionTimeoutMs: 3000 });
    await member.start();
    const key = keysThat('move', 2, 1, 1)[0];
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 100 });
    const { dueAt } = await producer.send({ key, payload: { seq: 1 }, delayMs: 8000 });
    const admin = new CoordinatorAdmin(redis.client());
    await admin.resizeShards(streamPrefix, 1, { graceMs: 50, switchDelayMs: 50 });
    const readabilityOf1 = async () =>
      (await admin.describeGroup(streamPrefix, 'group')).shards.find((s) => s.shardIndex === 1)?.readability;
    await pollUntil('shard 1 drained', async () => (await readabilityOf1()) === 'drained', { timeoutMs: 20_000 });
    const [seconds, micros] = await redis.client().time();
    expect(Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)).toBeLessThan(dueAt!);
    expect(recorded.seen).toEqual([]);
    expect(await redis.client().zcard(keys.shardSchedule(streamPrefix, 0))).toBe(1); // waiting on its key's shard, due time kept
    await pollUntil('handled', async () => recorded.seen.length === 1, { timeoutMs: 20_000 });
    expect(recorded.seen).toEqual([{ key, seq: 1, shardIndex: 0 }]);
    expect(await storedEntries(streamPrefix, 2)).toEqual({ scheduled: 0, streams: [{ key, seq: 1, shardIndex: 0 }] });
  });

  it("ordered shrink: a removed shard's keyed delayed entry moved late still goes before its key's later delayed entry on the surviving shard", async () => {
    // The removed shard's owner cannot release (its release calls fail) until well after the key's
    // next delayed entry, sent to the surviving shard after the switch, is due there: that one must
    // not enter the surviving shard's stream before the moved one (both are held by the cutover,
    // then handled in stream order).
    const streamPrefix = await aStream(2, 'delayed-shrink-late-move');
    const key = keysThat('move', 2, 1, 1)[0];
    const { slow, recorded } = await slowReleaser(streamPrefix, keys.shardSchedule(streamPrefix, 1), 2);
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 100 });
    // Due after the switch (which waits for the member's lease as of the resize to run out).
    const first = await producer.send({ key, payload: { seq: 1 }, delayMs: 6000 });
    expect(first.shardIndex).toBe(1);
    const resized = await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 1, {
      ordered: true,
      switchDelayMs: 300,
      graceMs: 50,
    });
    await pollUntil('switched', async () => (await redisNow()) > Date.parse(resized.switchAt!), { timeoutMs: 10_000 });
    expect(await redisNow()).toBeLessThan(first.dueAt!);
    const second = await producer.send({ key, payload: { seq: 2 }, delayMs: first.dueAt! - (await redisNow()) + 300 });
    expect(second.shardIndex).toBe(0);
    expect(second.dueAt!).toBeGreaterThan(first.dueAt!);
    slow.releasesFrom = second.dueAt! + 1000;
    await pollUntil('both handled', async () => recorded.seen.length === 2, { timeoutMs: 20_000 });
    expect(recorded.seqsOf(key)).toEqual([1, 2]);
    expect(recorded.seen.map((s) => s.shardIndex)).toEqual([0, 0]);
  });

  it("a release call releases only below its givers' bound, nothing while its caller is behind the shard's routing marker, and all once neither holds", async () => {
    const streamPrefix = await aStream(2, 'delayed-shrink-held');
    const key = keysThat('stay', 2, 1, 1)[0];
    const owner = await ownedBy(streamPrefix, 0, 'owner');
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 100 });
    const resized = await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 1, { ordered: true, switchDelayMs: 300 });
    const markerVersion = Number(await redis.client().hget(keys.shardRouting(streamPrefix, 0), 'version'));
    await pollUntil('switched', async () => (await redisNow()) > Date.parse(resized.switchAt!));
    const sent = await producer.send({ key, payload: { seq: 1 }, delayMs: 1 });
    await pollUntil('due', async () => (await redisNow()) > sent.dueAt!);
    const schedule = keys.shardSchedule(streamPrefix, 0);
    // A giver's first entry due at the same time: held (exclusive), counted, not timed.
    expect(await owner.releaseDue(0, 1, 256, '', sent.dueAt!, markerVersion)).toMatchObject({ released: 0, heldDue: 1, nextDueInMs: -1 });
    // A caller that has not read the resize (its history of the version before): nothing, not even counted.
    expect(await owner.releaseDue(0, 1, 256, '', undefined, markerVersion - 1)).toMatchObject({ released: 0, heldDue: 0, moves: [] });
    expect(await redis.client().zcard(schedule)).toBe(1);
    expect(await owner.releaseDue(0, 1, 256, '', sent.dueAt! + 1, markerVersion)).toMatchObject({ released: 1, heldDue: 0 });
    expect(await redis.client().zcard(schedule)).toBe(0);
    expect((await storedEntries(streamPrefix, 1)).streams.map((e) => e.seq)).toEqual([1]);
  });

  it('an owner killed between the two steps of a move loses nothing and writes nothing twice; a late resend of the first step writes nothing', async () => {
    const streamPrefix = await aStream(2, 'delayed-move-crash');
    const [key] = keysThat('move', 2, 4, 1);
    const [from, to] = [shardForKey(key, 2), shardForKey(key, 4)];
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ key, payload: { seq: 1 }, delayMs: 200 });
    await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 4, { ordered: false });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const dying = await ownedBy(streamPrefix, from, 'dying-member');
    const outcome = await dying.releaseDue(from, 1, 256);
    expect(outcome?.released).toBe(0);
    expect(outcome?.moves.map((m) => [m.key, m.count])).toEqual([[key, 4]]);
    const move = outcome!.moves[0];
    expect(await dying.acceptMove(to, from, move)).toMatch(/^\d+-\d+$/);
    // It dies here: the entry is in its key's shard and still waits in its source's schedule.
    expect(await storedEntries(streamPrefix, 4)).toEqual({ scheduled: 1, streams: [{ key, seq: 1, shardIndex: to }] });
    await redis.client().del(keys.shardFence(streamPrefix, from, 'group'));
    const recorded = recorder();
    await aMember({ streamPrefix, handler: recorded.handler }).start();
    await pollUntil('handled', async () => recorded.seen.length === 1, { timeoutMs: 15_000 });
    await pollUntil('the source schedule emptied', async () => (await storedEntries(streamPrefix, 4)).scheduled === 0);
    expect(await dying.acceptMove(to, from, move)).toBe('DONE'); // the dead owner's request, arriving late
    expect(await storedEntries(streamPrefix, 4)).toEqual({ scheduled: 0, streams: [{ key, seq: 1, shardIndex: to }] });
    expect(recorded.seen).toEqual([{ key, seq: 1, shardIndex: to }]);
  });

  it('a move stamped before another resize is refused by its old target for good and routed again under the new count', async () => {
    const streamPrefix = await aStream(2, 'delayed-move-restamp');
    // Moved by both growths: 2 -> 4 and 4 -> 8.
    const key = keysThat('move', 2, 4, 50).find((k) => shardForKey(k, 4) !== shardForKey(k, 8))!;
    const from = shardForKey(key, 2);
    const admin = new CoordinatorAdmin(redis.client());
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ key, payload: { seq: 1 }, delayMs: 200 });
    await admin.resizeShards(streamPrefix, 4, { ordered: false });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const dying = await ownedBy(streamPrefix, from, 'dying-member');
    const move = (await dying.releaseDue(from, 1, 256))!.moves[0];
    expect(move.count).toBe(4);
    await admin.resizeShards(streamPrefix, 8, { ordered: false });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await dying.acceptMove(shardForKey(key, 4), from, move)).toBe('REFUSED');
    await redis.client().del(keys.shardFence(streamPrefix, from, 'group'));
    const recorded = recorder();
    await aMember({ streamPrefix, handler: recorded.handler }).start();
    await pollUntil('handled', async () => recorded.seen.length === 1, { timeoutMs: 15_000 });
    expect(recorded.seen).toEqual([{ key, seq: 1, shardIndex: shardForKey(key, 8) }]);
    await pollUntil('the source schedule emptied', async () => (await storedEntries(streamPrefix, 8)).scheduled === 0);
    expect((await storedEntries(streamPrefix, 8)).streams).toEqual([{ key, seq: 1, shardIndex: shardForKey(key, 8) }]);
  });

  it("a stale 'stays here' from one group, settled after another group re-stamped the entry and moved it elsewhere, releases nothing", async () => {
    const streamPrefix = await aStream(2, 'delayed-move-stale-stay');
    // Stays on its shard in the growth 2 -> 4 (but waits to move: routed under 2), moves in 4 -> 8.
    const key = keysThat('stay', 2, 4, 50).find((k) => shardForKey(k, 4) !== shardForKey(k, 8))!;
    const [from, to] = [shardForKey(key, 4), shardForKey(key, 8)];
    const admin = new CoordinatorAdmin(redis.client());
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ key, payload: { seq: 1 }, delayMs: 200 });
    await admin.resizeShards(streamPrefix, 4, { ordered: false });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const ownerA = await ownedBy(streamPrefix, from, 'member-a', 'group-a');
    const ownerB = await ownedBy(streamPrefix, from, 'member-b', 'group-b');
    // Both groups' owners read the entry waiting to move under 4: its key routes here, it stays.
    expect((await ownerA.releaseDue(from, 1, 256))!.moves.map((m) => [m.key, m.count])).toEqual([[key, 4]]);
    const staleMove = (await ownerB.releaseDue(from, 1, 256))!.moves[0];
    await admin.resizeShards(streamPrefix, 8, { ordered: false });
    await new Promise((resolve) => setTimeout(resolve, 50));
    // Group A settles its stay after the switch: stamped again under 8, and moved to its key's shard there.
    expect((await ownerA.releaseDue(from, 1, 256, settledMove('s', staleMove)))!.released).toBe(0);
    const move = (await ownerA.releaseDue(from, 1, 256))!.moves[0];
    expect([move.id, move.seq, move.count]).toEqual([staleMove.id, staleMove.seq, 8]);
    expect(await ownerA.acceptMove(to, from, move)).toMatch(/^\d+-\d+$/);
    // Group B's stay, computed under 4, arrives now: the move number matches, the stamp does not.
    expect((await ownerB.releaseDue(from, 1, 256, settledMove('s', staleMove)))!.released).toBe(0);
    expect((await ownerA.releaseDue(from, 1, 256, settledMove('d', move)))!.moves).toEqual([]);
    expect(await storedEntries(streamPrefix, 8)).toEqual({ scheduled: 0, streams: [{ key, seq: 1, shardIndex: to }] });
  });

  it("an entry whose key's shard has no routing marker waits to move, visibly, and moves once the marker is written", async () => {
    const streamPrefix = await aStream(2, 'delayed-move-wait');
    const [key] = keysThat('move', 2, 4, 1);
    const [from, to] = [shardForKey(key, 2), shardForKey(key, 4)];
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ key, payload: { seq: 1 }, delayMs: 200 });
    const admin = new CoordinatorAdmin(redis.client());
    await admin.resizeShards(streamPrefix, 4, { ordered: false });
    await redis.client().del(keys.shardRouting(streamPrefix, to)); // as if the resize could not write it
    const recorded = recorder();
    const member = aMember({ streamPrefix, handler: recorded.handler });
    await member.start();
    await pollUntil('the wait shown', async () =>
      member.stats().problems.some((p) => p.startsWith(`shard ${from}: a due delayed entry waits to move to shard ${to}`)),
    );
    expect((await storedEntries(streamPrefix, 4)).scheduled).toBe(1);
    await admin.resizeShards(streamPrefix, 4); // the same count again writes the missing markers
    await pollUntil('handled', async () => recorded.seen.length === 1, { timeoutMs: 15_000 });
    expect(recorded.seen).toEqual([{ key, seq: 1, shardIndex: to }]);
    await pollUntil('the wait cleared', async () => !member.stats().problems.some((p) => p.includes('waits to move')));
  });

  it("one release call counts a deferred key's retry out of its state and leaves a moved key's due delayed entry waiting to move", async () => {
    const streamPrefix = await aStream(2, 'delayed-move-deferred');
    const [moved] = keysThat('move', 2, 4, 1);
    const from = shardForKey(moved, 2);
    const staying = keysThat('stay', 2, 4, 50).find((k) => shardForKey(k, 2) === from)!;
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ key: moved, payload: { seq: 1 }, delayMs: 200 });
    await producer.send({ key: staying, payload: { seq: 1 } });
    await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 4, { ordered: false });
    const stream = keys.shardStream(streamPrefix, from);
    await redis.client().xgroup('CREATE', stream, 'group', '0');
    const read = (await redis.client().xreadgroup('GROUP', 'group', 'c', 'STREAMS', stream, '>')) as [string, [string, string[]][]][];
    const [id, fields] = read[0][1][0];
    const owner = await ownedBy(streamPrefix, from, 'owner-member');
    expect((await owner.defer(from, 1, { id, fields }, 1, 0, `k${staying}`))?.keyState?.count).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const outcome = (await owner.releaseDue(from, 1, 256))!;
    expect(outcome.released).toBe(1);
    expect(outcome.keyStates.map((k) => [k.field, k.count, k.partial])).toEqual([[`k${staying}`, 0, false]]);
    expect(outcome.moves.map((m) => [m.key, m.count])).toEqual([[moved, 4]]);
    // The released copy is the key's first and last released and its last appended (its barrier).
    const { due, barrier } = outcome.keyStates[0];
    expect(await redis.client().hget(keys.shardDeferredKeys(streamPrefix, from, 'group'), `k${staying}`)).toBe(
      `0|${due}|0|${barrier}|${barrier}|${barrier}`,
    );
    const streamIds = (await redis.client().xrange(stream, '-', '+')).map(([entryId]) => entryId);
    expect(streamIds).toEqual([id, barrier]);
  });

  it('one release call that releases some due entries and moves others removes exactly the released ones from the schedule', async () => {
    const streamPrefix = await aStream(2, 'delayed-move-mixed');
    const from = 0;
    const [first, other] = keysThat('move', 2, 4, 40).filter((k) => shardForKey(k, 2) === from);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    // In due order: an entry sent to the shard itself (never moves), a keyed one whose key moves, again.
    await producer.send({ shardIndex: from, payload: { seq: 1 }, delayMs: 200 });
    await producer.send({ key: first, payload: { seq: 2 }, delayMs: 200 });
    await producer.send({ shardIndex: from, payload: { seq: 3 }, delayMs: 200 });
    await producer.send({ key: other, payload: { seq: 4 }, delayMs: 200 });
    await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 4, { ordered: false });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const owner = await ownedBy(streamPrefix, from, 'owner-member');
    const outcome = (await owner.releaseDue(from, 1, 256))!;
    expect(outcome.released).toBe(2);
    expect(outcome.moves.map((m) => m.key)).toEqual([first, other]);
    const client = redis.client();
    const inStream = (await client.xrange(keys.shardStream(streamPrefix, from), '-', '+')).map(
      ([, fields]) => (JSON.parse(fields[fields.indexOf('p') + 1]) as KeyedPayload).seq,
    );
    expect(inStream).toEqual([1, 3]);
    // The two waiting to move are the schedule's only entries, each with its fields.
    const left = await client.zrange(keys.shardSchedule(streamPrefix, from), '0', '-1');
    expect(left).toEqual(outcome.moves.map((m) => m.id));
    const fields = await client.hmget(keys.shardScheduledEntries(streamPrefix, from), ...left);
    expect(fields.every((f) => f !== null)).toBe(true);
  });

  it('release calls across the per-call cap, with ties in due time, entries waiting to move ahead and fields gone, release each entry once and in due order', async () => {
    const streamPrefix = await aStream(2, 'delayed-move-model');
    const from = 0;
    const movedKeys = keysThat('move', 2, 4, 1200).filter((k) => shardForKey(k, 2) === from);
    const total = 300;
    expect(movedKeys.length).toBeGreaterThanOrEqual(total);
    const keyed = (j: number) => j % 7 === 3;
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
      Array.from({ length: total }, (_, j) =>
        keyed(j)
          ? { key: movedKeys[j], payload: { seq: j }, delayMs: 600_000 }
          : { shardIndex: from, payload: { seq: j }, delayMs: 600_000 },
      ),
    );
    const client = redis.client();
    const schedule = keys.shardSchedule(streamPrefix, from);
    const entries = keys.shardScheduledEntries(streamPrefix, from);
    // One batch, one due time: the schedule's order is the batch's.
    const ids = await client.zrange(schedule, '0', '-1');
    expect(ids).toHaveLength(total);
    await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 4, { ordered: false });
    await new Promise((resolve) => setTimeout(resolve, 300));
    // Due times by hand: 11 distinct ones, so ties interleave keyed and unkeyed entries (a tie goes
    // in id order), and three entries not due yet.
    const [seconds] = await client.time();
    const nowMs = Number(seconds) * 1000;
    const notDue = new Set([100, 200, 250]);
    const score = (j: number) => (notDue.has(j) ? nowMs + 600_000 + j : nowMs - 100_000 + ((j * 37) % 11));
    for (let j = 0; j < total; j++) await client.zadd(schedule, 'XX', score(j), ids[j]);
    // Two unkeyed entries' fields gone (deleted from outside): removed, nothing written.
    const gone = new Set([11, 50]);
    for (const j of gone) await client.hdel(entries, ids[j]);

    // The model: due entries in (due time, id) order; a call takes the first `limit` of those left,
    // every keyed one waits to move (its key routes under 4 shards now), every other is released.
    const byId = new Map(ids.map((id, j) => [id, j]));
    let dueLeft = ids
      .map((id, j) => ({ id, j }))
      .filter(({ j }) => !notDue.has(j))
      .sort((a, b) => score(a.j) - score(b.j) || (a.id < b.id ? -1 : 1));
    const waiting: string[] = [];
    const releasedSeqs: number[] = [];
    const owner = await ownedBy(streamPrefix, from, 'owner-member');
    // The first call ends on a keyed entry (the 7th due), so the second starts with one waiting to
    // move ahead of a run of released ones; the second stops at the cap mid-schedule.
    for (const limit of [7, 256, 256]) {
      const taken = dueLeft.slice(0, limit);
      if (limit === 7) expect(keyed(taken[6].j) && !keyed(dueLeft[7].j)).toBe(true);
      dueLeft = dueLeft.slice(limit);
      let releasedNow = 0;
      for (const { id, j } of taken) {
        if (keyed(j)) waiting.push(id);
        else if (!gone.has(j)) {
          releasedSeqs.push(j);
          releasedNow++;
        }
      }
      const outcome = (await owner.releaseDue(from, 1, limit))!;
      expect(outcome.released).toBe(releasedNow);
      expect(outcome.moves.map((m) => m.id)).toEqual(waiting.slice(0, 64));
      const inStream = (await client.xrange(keys.shardStream(streamPrefix, from), '-', '+')).map(
        ([, fields]) => (JSON.parse(fields[fields.indexOf('p') + 1]) as KeyedPayload).seq,
      );
      expect(inStream).toEqual(releasedSeqs);
      // What is left: the waiting ones in move order, then the due ones not reached, then those not due.
      const left = await client.zrange(schedule, '0', '-1');
      const notDueIds = [...notDue].map((j) => ids[j]);
      expect(left).toEqual([...waiting, ...dueLeft.map((e) => e.id), ...notDueIds]);
      // Exactly their fields stay: nothing of a released entry, nothing of a waiting one lost.
      // The last move number given is kept once one was given.
      const expectedFields = waiting.length > 0 ? ['#seq', '#move'] : ['#seq'];
      for (const id of left) {
        const j = byId.get(id)!;
        if (!gone.has(j)) expectedFields.push(id);
        if (keyed(j)) expectedFields.push(`${id}:c`);
        if (waiting.includes(id)) expectedFields.push(`${id}:m`);
      }
      expect((await client.hkeys(entries)).sort()).toEqual(expectedFields.sort());
    }
    expect(dueLeft).toEqual([]);
    expect(waiting.length).toBeGreaterThan(0);
  });

  it('an XADD that fails keeps every entry once, with a run released before it and after a move in the same call: those released removed, it and the rest kept', async () => {
    const streamPrefix = await aStream(2, 'delayed-move-failed');
    const from = 0;
    const [moved] = keysThat('move', 2, 4, 40).filter((k) => shardForKey(k, 2) === from);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    // In due order: released, failing, moved, failing, released (seq 3 is the moved one).
    for (const seq of [1, 2, 3, 4, 5]) {
      await producer.send(
        seq === 3 ? { key: moved, payload: { seq }, delayMs: 200 } : { shardIndex: from, payload: { seq }, delayMs: 200 },
      );
    }
    await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 4, { ordered: false });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const client = redis.client();
    const schedule = keys.shardSchedule(streamPrefix, from);
    const entries = keys.shardScheduledEntries(streamPrefix, from);
    const ids = await client.zrange(schedule, '0', '-1');
    // The fields of seq 2 and 4 made unwritable (an odd field list: the XADD fails; OOM cannot fail a
    // script's XADD after its first write), their own fields kept to put back.
    const unwritable = async (i: number) => {
      const fields = await client.hgetBuffer(entries, ids[i]);
      await client.eval("redis.call('HSET', KEYS[1], ARGV[1], cmsgpack.pack({ 'odd' }))", 1, entries, ids[i]);
      return () => client.hset(entries, ids[i], fields!);
    };
    const putBack2 = await unwritable(1);
    const putBack4 = await unwritable(3);
    const owner = await ownedBy(streamPrefix, from, 'owner-member');
    const inStream = async () =>
      (await client.xrange(keys.shardStream(streamPrefix, from), '-', '+')).map(
        ([, fields]) => (JSON.parse(fields[fields.indexOf('p') + 1]) as KeyedPayload).seq,
      );
    // A run released before the failure (removed by rank at the failure).
    await expect(owner.releaseDue(from, 1, 256)).rejects.toThrow(/wrong number of arg/i);
    expect(await inStream()).toEqual([1]);
    expect(await client.zrange(schedule, '0', '-1')).toEqual(ids.slice(1));
    // A run closed by a move, then the failure.
    await putBack2();
    await expect(owner.releaseDue(from, 1, 256)).rejects.toThrow(/wrong number of arg/i);
    expect(await inStream()).toEqual([1, 2]);
    expect(await client.zrange(schedule, '0', '-1')).toEqual([ids[2], ids[3], ids[4]]);
    // A run behind the one waiting to move.
    await putBack4();
    const outcome = (await owner.releaseDue(from, 1, 256))!;
    expect(outcome.released).toBe(2);
    expect(outcome.moves.map((m) => m.id)).toEqual([ids[2]]);
    expect(await inStream()).toEqual([1, 2, 4, 5]);
    expect(await client.zrange(schedule, '0', '-1')).toEqual([ids[2]]);
    expect((await client.hkeys(entries)).sort()).toEqual(['#move', '#seq', ids[2], `${ids[2]}:c`, `${ids[2]}:m`].sort());
  });

  it("a member whose removal step is lost, and one whose first step's reply is lost, still moves each entry once", async () => {
    const streamPrefix = await aStream(2, 'delayed-move-lost');
    const moved = keysThat('move', 2, 4, 6);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(moved.map((key) => ({ key, payload: { seq: 1 }, delayMs: 200 })));
    await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 4, { ordered: false });
    const connection = redis.client();
    const other = redis.client();
    let lostRemovals = 0;
    let lostReplies = 0;
    const schedules = [0, 1].map((i) => keys.shardSchedule(streamPrefix, i));
    const takenLogs = [0, 1, 2, 3].map((i) => keys.shardMovesTaken(streamPrefix, i));
    hookCommands(connection, async (name, args) => {
      // The second step (a release call settling moves done, its ARGV[4], after the sha, the key count and the keys): lost before it reaches Redis, twice.
      if (schedules.some((s) => isScriptOn(name, args, s)) && /(^| )ds\d/.test(args[2 + Number(args[1]) + 3]) && lostRemovals < 2) {
        lostRemovals++;
        return new Error('connection lost');
      }
      // The first step: run, and its reply lost, twice.
      if (takenLogs.some((t) => isScriptOn(name, args, t)) && lostReplies < 2) {
        lostReplies++;
        await other.call(name, ...args);
        return new Error('connection lost');
      }
      return 'send';
    });
    const recorded = recorder();
    await aMember({ streamPrefix, handler: recorded.handler }, connection).start();
    await pollUntil('all handled', async () => recorded.seen.length === moved.length, { timeoutMs: 20_000 });
    await pollUntil('the schedules emptied', async () => (await storedEntries(streamPrefix, 4)).scheduled === 0, { timeoutMs: 15_000 });
    expect(lostRemovals).toBe(2);
    expect(lostReplies).toBe(2);
    const { streams } = await storedEntries(streamPrefix, 4);
    expect(streams.map((s) => s.key).sort()).toEqual([...moved].sort());
    for (const s of streams) expect(s.shardIndex).toBe(shardForKey(s.key, 4));
    await new Promise((resolve) => setTimeout(resolve, 2 * BLOCK_MS));
    expect(recorded.seen).toHaveLength(moved.length);
  });
});

// A key's order for delayed entries across resizes whichever side is slow (docs/runtime.md, Delayed
// delivery, Resharding): an attack review of afcd154 (which held a surviving shard's schedule only
// while its own group's ordered shrink cutover was pending) found each of these; they failed until
// a shard that received keys released only what is due before the first entry still waiting on the
// shards that gave them (ScheduleGivers, releaseDue-8.lua ARGV[8]).
describe('delayed order across resizes, whichever owner is slow', () => {
  it('a group created after the switch (replayed step, no schedule hold) releases the surviving shard ahead of a late move: the live group handles the key out of order', async () => {
    const streamPrefix = await aStream(2, 'gap-replay-hold');
    const key = keysThat('move', 2, 1, 1)[0];
    const removedSchedule = keys.shardSchedule(streamPrefix, 1);
    const live = await slowReleaser(streamPrefix, removedSchedule, 2);
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 100 });
    const first = await producer.send({ key, payload: { seq: 1 }, delayMs: 8000 });
    const resized = await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 1, {
      ordered: true,
      switchDelayMs: 300,
      graceMs: 50,
    });
    await pollUntil('switched', async () => (await redisNow()) > Date.parse(resized.switchAt!), { timeoutMs: 10_000 });
    // A new group, created now: its cutover is a replayed step (scheduleHeldShards: nothing held).
    const created = await slowReleaser(streamPrefix, removedSchedule, 2, 'late-group');
    expect(await redisNow()).toBeLessThan(first.dueAt!);
    const second = await producer.send({ key, payload: { seq: 2 }, delayMs: first.dueAt! - (await redisNow()) + 300 });
    live.slow.releasesFrom = created.slow.releasesFrom = second.dueAt! + 1000;
    await pollUntil('both handled by the live group', async () => live.recorded.seen.length === 2, { timeoutMs: 25_000 });
    const order = {
      stream0: await streamSeqs(streamPrefix, 0),
      liveGroup: live.recorded.seqsOf(key),
      newGroup: created.recorded.seqsOf(key),
    };
    expect(order).toEqual({ stream0: [1, 2], liveGroup: [1, 2], newGroup: [1, 2] });
  });

  it("ordered growth, after its cutover: a key's delayed entry left on its old shard and moved late goes after the key's later delayed entry on the new shard", async () => {
    const streamPrefix = await aStream(2, 'gap-growth-late-move');
    const key = keysThat('move', 2, 4, 1)[0];
    const [oldShard, newShard] = [shardForKey(key, 2), shardForKey(key, 4)];
    const { slow, recorded, member } = await slowReleaser(streamPrefix, keys.shardSchedule(streamPrefix, oldShard), 2);
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 100 });
    const first = await producer.send({ key, payload: { seq: 1 }, delayMs: 4500 });
    await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 4, { ordered: true, graceMs: 200 });
    await pollUntil('cutover completed, all four shards owned', async () => member.ownedShards().length === 4, { timeoutMs: 10_000 });
    expect(await redisNow()).toBeLessThan(first.dueAt!);
    const second = await producer.send({ key, payload: { seq: 2 }, delayMs: first.dueAt! - (await redisNow()) + 300 });
    expect(second.shardIndex).toBe(newShard);
    // Held while the old shard's owner does not get to the earlier entry: visibly, a few idle waits on.
    await pollUntil(
      'the new shard says what its due entry waits for',
      async () => member.stats().problems.some((p) => p.startsWith(`shard ${newShard}: 1 due delayed entries wait for shard ${oldShard}`)),
      { timeoutMs: 20_000 },
    );
    expect(recorded.seen).toEqual([]);
    slow.releasesFrom = 0;
    await pollUntil('both handled', async () => recorded.seen.length === 2, { timeoutMs: 20_000 });
    await pollUntil('the wait cleared', async () => !member.stats().problems.some((p) => p.includes('due delayed entries wait for shard')));
    expect({ stream: await streamSeqs(streamPrefix, newShard), handled: recorded.seqsOf(key) }).toEqual({
      stream: [1, 2],
      handled: [1, 2],
    });
  });

  it("ordered shrink: a removed shard's keyed entry moved (not due) to the surviving shard's schedule keeps its place among its key's entries of the same due time", async () => {
    const streamPrefix = await aStream(2, 'gap-same-due');
    const key = keysThat('move', 2, 1, 1)[0];
    const { slow, recorded } = await slowReleaser(streamPrefix, keys.shardSchedule(streamPrefix, 1), 2);
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 100 });
    const deliverAt = (await redisNow()) + 5000;
    const first = await producer.send({ key, payload: { seq: 1 }, deliverAt });
    const resized = await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 1, {
      ordered: true,
      switchDelayMs: 300,
      graceMs: 50,
    });
    await pollUntil('switched', async () => (await redisNow()) > Date.parse(resized.switchAt!), { timeoutMs: 10_000 });
    // Sent after the switch, for the same delivery time: after the first in send order.
    const second = await producer.send({ key, payload: { seq: 2 }, deliverAt });
    expect(second.dueAt).toBe(first.dueAt);
    slow.releasesFrom = 0; // the removed shard's owner gets to its schedule now (moved before it is due)
    await pollUntil('moved', async () => (await redis.client().zcard(keys.shardSchedule(streamPrefix, 0))) === 2, { timeoutMs: 10_000 });
    await pollUntil('both handled', async () => recorded.seen.length === 2, { timeoutMs: 20_000 });
    expect(recorded.seqsOf(key)).toEqual([1, 2]);
  });
});
