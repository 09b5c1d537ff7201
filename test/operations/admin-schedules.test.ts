import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, StreamProducer, type StreamMessage } from '@redis-stream-coordinator/core';
import { shardForKey } from '../../packages/core/src/producer/key-hash';
import { fenceToken, ShardClient } from '../../packages/core/src/redis/shard-client';
import type { KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { rscInProcess } from '../support/rsc';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// docs/operations.md, Schedules: what waits outside the streams (delayed entries, deferred retries)
// seen in describeGroup and rsc, made due now or dropped, against a real redis-server.

const redis = useRedisServer();
const aMember = memberFactory(redis, { blockMs: 200 });
const keys = new KeyBuilder();
const admin = () => new CoordinatorAdmin(redis.client());
const HOUR = 3_600_000;

function rsc(...args: string[]) {
  return rscInProcess(['--url', redis.server.url, ...args]);
}

/** A stream of `shardCount` shards and a member of "group" recording what it handles; `fails` entries are deferred. */
async function aGroup(label: string, shardCount: number, fails: (m: StreamMessage<KeyedPayload>) => boolean = () => false) {
  const streamPrefix = uniqueName(label);
  await admin().createStream({ streamPrefix, shardCount });
  const handled: number[] = [];
  const member = aMember({
    streamPrefix,
    retryMode: 'deferred',
    maxAttempts: 5,
    retryBackoffMs: HOUR,
    retryBackoffMaxMs: HOUR,
    handler: (message: StreamMessage<KeyedPayload>) => {
      handled.push(message.payload.seq);
      if (fails(message)) throw new Error(`fails ${message.payload.seq}`);
    },
  });
  await member.start();
  await pollUntil('the member owns every shard', async () => member.ownedShards().length === shardCount);
  return { streamPrefix, member, handled, producer: new StreamProducer(redis.client(), { streamPrefix }) };
}

describe('describeGroup: what waits in the schedules, and when it is due', () => {
  it("gives each shard's next due time per schedule (Redis' clock) and the group's totals", async () => {
    const { streamPrefix, producer, handled } = await aGroup('sched-describe', 3, (m) => m.payload.seq === 9);
    const before = await admin().serverTimeMs();
    const a = await producer.send({ shardIndex: 1, payload: { seq: 1 }, delayMs: 2 * HOUR });
    const b = await producer.send({ shardIndex: 1, payload: { seq: 2 }, delayMs: HOUR });
    await producer.send({ shardIndex: 2, payload: { seq: 3 }, delayMs: 3 * HOUR });
    await producer.send({ shardIndex: 0, key: 'bad', payload: { seq: 9 } });
    await pollUntil(
      'the failing entry deferred',
      async () => handled.includes(9) && (await admin().describeGroup(streamPrefix, 'group')).group.deferred === 1,
    );
    const d = await admin().describeGroup(streamPrefix, 'group');
    expect(d.shards.map((s) => [s.scheduled, s.deferred])).toEqual([
      [0, 1],
      [2, 0],
      [1, 0],
    ]);
    expect(d.shards[1].nextDueAt).toEqual({ scheduled: b.dueAt, deferred: null });
    expect(a.dueAt).toBeGreaterThan(b.dueAt!);
    expect(d.shards[0].nextDueAt.scheduled).toBeNull();
    expect(d.shards[0].nextDueAt.deferred).toBeGreaterThanOrEqual(before + HOUR);
    expect(d.group).toMatchObject({
      scheduled: 3,
      deferred: 1,
      nextDueAt: { scheduled: b.dueAt, deferred: d.shards[0].nextDueAt.deferred },
    });
    expect(d.group.describedAt).toBeGreaterThanOrEqual(before);
    expect(d.group.describedAt).toBeLessThan(b.dueAt!);
    // An empty group: nulls and zeros.
    const other = await aGroup('sched-describe-empty', 2);
    const empty = await admin().describeGroup(other.streamPrefix, 'group');
    expect(empty.group).toMatchObject({ scheduled: 0, deferred: 0, nextDueAt: { scheduled: null, deferred: null } });
  });

  it('at the most shards (shardCount at its maximum, 8,192): one describe script, every shard counted, the first and last shard due', async () => {
    const streamPrefix = uniqueName('sched-max');
    const count = 8192;
    await admin().createStream({ streamPrefix, shardCount: count });
    const member = aMember({ streamPrefix, shardCount: count, handler: () => {} });
    await member.start();
    await pollUntil('the member owns every shard', async () => member.ownedShards().length === count, { timeoutMs: 60_000 });
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const first = await producer.send({ shardIndex: 0, payload: { seq: 0 }, delayMs: 2 * HOUR });
    const last = await producer.send({ shardIndex: count - 1, payload: { seq: 1 }, delayMs: HOUR });
    const d = await admin().describeGroup(streamPrefix, 'group');
    expect(d.shards).toHaveLength(count);
    expect([d.shards[0].nextDueAt.scheduled, d.shards[count - 1].nextDueAt.scheduled]).toEqual([first.dueAt, last.dueAt]);
    expect(d.group).toMatchObject({ scheduled: 2, nextDueAt: { scheduled: last.dueAt } });
    await member.stop();
  }, 120_000);
});

describe('readSchedule, releaseScheduled, dropScheduled', () => {
  it("lists a shard's delayed entries in due order, a page at a time; release makes one due now and its owner releases it in its next turn", async () => {
    const { streamPrefix, producer, handled } = await aGroup('sched-release', 1);
    const sent = [];
    for (let seq = 0; seq < 5; seq++)
      sent.push(await producer.send({ key: `k${seq}`, payload: { seq }, delayMs: HOUR + (5 - seq) * 1000 }));
    const page1 = await admin().readSchedule({ streamPrefix, shardIndex: 0 }, { count: 2 });
    expect(page1.total).toBe(5);
    expect(page1.consumerGroup).toBeNull();
    expect(page1.entries.map((e) => e.id)).toEqual([sent[4].id, sent[3].id]);
    expect(page1.entries[0]).toMatchObject({ key: 'k4', dueAt: sent[4].dueAt, payloadText: '{"seq":4}', attempts: undefined });
    expect(page1.entries[0].dueInMs).toBeGreaterThan(HOUR - 60_000);
    const page2 = await admin().readSchedule({ streamPrefix, shardIndex: 0 }, { count: 2, after: page1.next! });
    const page3 = await admin().readSchedule({ streamPrefix, shardIndex: 0 }, { count: 2, after: page2.next! });
    expect([...page2.entries, ...page3.entries].map((e) => e.id)).toEqual([sent[2].id, sent[1].id, sent[0].id]);
    expect(page3.next).toBeNull();

    const released = await admin().releaseScheduled({ streamPrefix, shardIndex: 0 }, sent[2].id);
    expect(released).toMatchObject({ id: sent[2].id, found: true, madeDue: true, previousDueAt: sent[2].dueAt });
    await pollUntil('the released entry handled', async () => handled.includes(2), { timeoutMs: 5_000 });
    expect(handled).toEqual([2]);
    // Released into the stream: no longer in the schedule.
    expect(await admin().releaseScheduled({ streamPrefix, shardIndex: 0 }, sent[2].id)).toMatchObject({ found: false, madeDue: false });
    // A page after an entry released meanwhile goes on from its due time.
    const afterGone = await admin().readSchedule({ streamPrefix, shardIndex: 0 }, { after: page2.next! });
    expect(afterGone.entries.map((e) => e.id)).toContain(sent[0].id);
  });

  it("lists a group's deferred retries with their attempts; drop removes one for good, and dropping it again changes nothing", async () => {
    // Two keys: a second failure of one key would be parked behind its deferral, not deferred (deferredOrder 'key').
    const { streamPrefix, producer, handled, member } = await aGroup('sched-drop', 1, (m) => m.key?.startsWith('bad') === true);
    await producer.send({ key: 'bad-7', payload: { seq: 7 } });
    await producer.send({ key: 'bad-8', payload: { seq: 8 } });
    const target = { streamPrefix, shardIndex: 0, consumerGroup: 'group' };
    await pollUntil('both deferred', async () => (await admin().readSchedule(target)).total === 2);
    const page = await admin().readSchedule(target);
    expect(page.consumerGroup).toBe('group');
    expect(page.entries.map((e) => [e.key, e.attempts, e.payloadText])).toEqual([
      ['bad-7', 1, '{"seq":7}'],
      ['bad-8', 1, '{"seq":8}'],
    ]);
    const [seven, eight] = page.entries;
    expect(await admin().dropScheduled(target, seven.id)).toEqual({ id: seven.id, dropped: true, dueAt: seven.dueAt, parkedMadeDue: 0 });
    expect(await admin().dropScheduled(target, seven.id)).toEqual({ id: seven.id, dropped: false, dueAt: null, parkedMadeDue: 0 });
    expect(await redis.client().hexists(keys.shardDeferredEntries(streamPrefix, 0, 'group'), seven.id)).toBe(0);
    // The other one made due: it comes back as attempt 2; the dropped one never does.
    await admin().releaseScheduled(target, eight.id);
    await pollUntil('the retry of 8 handled', async () => handled.filter((s) => s === 8).length === 2, { timeoutMs: 5_000 });
    await member.stop();
    expect(handled.filter((s) => s === 7)).toEqual([7]);
  });

  it("a delayed entry waiting to move to its key's shard after a resize is refused by drop, naming it, and release says it waits to move", async () => {
    const streamPrefix = uniqueName('sched-moving');
    await admin().createStream({ streamPrefix, shardCount: 2 });
    let key = 'key-0';
    for (let i = 1; shardForKey(key, 2) === shardForKey(key, 4); i++) key = `key-${i}`;
    const from = shardForKey(key, 2);
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key, payload: { seq: 1 }, delayMs: 100 });
    await admin().resizeShards(streamPrefix, 4, { ordered: false });
    await new Promise((resolve) => setTimeout(resolve, 200));
    // Its shard's owner (no member: the protocol's calls) finds it due and routed elsewhere: it waits to move.
    await redis.client().set(keys.shardFence(streamPrefix, from, 'group'), fenceToken('0', 1, 'owner'));
    const owner = new ShardClient(redis.client(), keys, streamPrefix, 'group', 'owner');
    const [move] = (await owner.releaseDue(from, 1, 256))!.moves;
    const target = { streamPrefix, shardIndex: from };
    // Listed as waiting for its move (its number), not with a due time (its score is no time).
    const page = await admin().readSchedule(target);
    expect(page.entries.map((e) => [e.id, e.dueAt, e.dueInMs, e.waitingForMove])).toEqual([[move.id, null, null, Number(move.seq)]]);
    const listed = await rsc('schedule', streamPrefix, String(from), 'list');
    expect(listed.stdout).toMatch(new RegExp(`^${move.id}\\s+waiting for move ${move.seq}\\s+-\\s+${key}\\s`, 'm'));
    const json = JSON.parse((await rsc('--json', 'schedule', streamPrefix, String(from), 'list')).stdout);
    expect(json.entries[0]).toMatchObject({ id: move.id, dueAt: null, dueInMs: null, waitingForMove: Number(move.seq) });
    // A page ending on it goes on after it.
    const first = await admin().readSchedule(target, { count: 1 });
    expect(first.next).not.toBeNull();
    expect((await admin().readSchedule(target, { after: first.next! })).entries).toEqual([]);
    await expect(admin().dropScheduled(target, move.id)).rejects.toThrow(
      `delayed entry ${move.id} of shard ${from} of "${streamPrefix}" is due and waits to move to its key's shard after a resize`,
    );
    expect(await admin().releaseScheduled(target, move.id)).toEqual({
      id: move.id,
      found: true,
      madeDue: false,
      waitingToMove: true,
      previousDueAt: null,
      dueAt: null,
      keyEntriesMadeDue: 0,
    });
    // Nothing changed: it still waits, stamped, and moves once.
    expect(await redis.client().hget(keys.shardScheduledEntries(streamPrefix, from), `${move.id}:m`)).toMatch(/^4 /);
    expect(await owner.acceptMove(shardForKey(key, 4), from, move)).toMatch(/^\d+-\d+$/);
    expect((await owner.releaseDue(from, 1, 256, `d${move.id}:${move.seq}`))!.moves).toEqual([]);
    // Nothing of it left behind: only the schedule's and the moves' sequences.
    expect((await redis.client().hkeys(keys.shardScheduledEntries(streamPrefix, from))).sort()).toEqual(['#move', '#seq']);
  });

  it('refuses ids that are not the kind the schedule holds, shards outside the stream and unknown groups, changing nothing', async () => {
    const { streamPrefix, producer } = await aGroup('sched-refuse', 2);
    const { id } = await producer.send({ shardIndex: 0, payload: { seq: 1 }, delayMs: HOUR });
    const delayed = { streamPrefix, shardIndex: 0 };
    const deferred = { ...delayed, consumerGroup: 'group' };
    for (const bad of ['', '*', 's1', 's00000000000000012', '1-0', `${id}\n`, '../x']) {
      await expect(admin().dropScheduled(delayed, bad), bad).rejects.toThrow(/delayed entry id .* is invalid/);
    }
    for (const bad of [id, '1', '1-x', '1-0 ', 'd1', 'd0000000000000001x', 'd0000000000000001pp']) {
      await expect(admin().releaseScheduled(deferred, bad), bad).rejects.toThrow(/deferred retry id .* is invalid/);
    }
    await expect(admin().readSchedule({ streamPrefix, shardIndex: 2 })).rejects.toThrow(/shardIndex must be an integer from 0 to 1, got 2/);
    await expect(admin().readSchedule({ ...delayed, consumerGroup: 'nope' })).rejects.toThrow(/group "nope" of stream .* does not exist/);
    await expect(admin().readSchedule({ ...delayed, consumerGroup: 'bad{group' })).rejects.toThrow();
    await expect(admin().readSchedule(delayed, { after: 'x' })).rejects.toThrow(/after "x" is invalid/);
    expect((await admin().readSchedule(delayed)).total).toBe(1);
  });
});

describe('rsc schedule and rsc describe', () => {
  it('describe shows scheduled and deferred per shard and when they are next due, and --json carries them', async () => {
    const { streamPrefix, producer } = await aGroup('sched-rsc-describe', 2);
    await producer.send({ shardIndex: 1, payload: { seq: 1 }, delayMs: HOUR });
    const described = await rsc('describe', streamPrefix, 'group');
    expect(described.code).toBe(0);
    expect(described.stdout).toMatch(
      /^SHARD\s+READABILITY\s+STATE\s+OWNER\s+OWNER EPOCH\s+LAG\s+PENDING\s+SCHEDULED\s+DEFERRED\s+PARKED\s+OLDEST PENDING/m,
    );
    expect(described.stdout).toMatch(/^1\s+readable\s+OWNED\s+\S+\s+\d+\s+0\s+0\s+1 \(next in (59m\d\ds|1h00m)\)\s+0\s+0\s+/m);
    expect(described.stdout).toMatch(/scheduled 1 \(next in .*\)\s+deferred 0\s+parked 0$/m);
    const view = JSON.parse((await rsc('describe', streamPrefix, 'group', '--json')).stdout);
    expect(view.shards[1]).toMatchObject({
      scheduled: 1,
      deferred: 0,
      parked: 0,
      nextDueAt: { scheduled: expect.any(Number), deferred: null },
    });
    expect(view.group).toMatchObject({ scheduled: 1, deferred: 0, parked: 0 });
  });

  it('schedule list (paged, --json), release and drop (only with --yes); bad ids and shards refused', async () => {
    const { streamPrefix, producer, handled } = await aGroup('sched-rsc', 2);
    const a = await producer.send({ shardIndex: 1, key: 'ka', payload: { seq: 1 }, delayMs: HOUR });
    const b = await producer.send({ shardIndex: 1, key: 'kb', payload: { seq: 2 }, delayMs: 2 * HOUR });
    const list = await rsc('schedule', streamPrefix, '1', 'list', '--count', '1');
    expect(list.code).toBe(0);
    expect(list.stdout).toContain(`delayed entries of shard 1 of stream ${streamPrefix}: 2 waiting`);
    expect(list.stdout).toMatch(new RegExp(`^${a.id}\\s+\\S+Z\\s+(59m\\d\\ds|1h00m)\\s+ka\\s+\\{"seq":1\\}$`, 'm'));
    expect(list.stdout).toContain(`(more: --after ${a.dueAt}:${a.id})`);
    const json = JSON.parse((await rsc('--json', 'schedule', streamPrefix, '1', 'list', '--after', `${a.dueAt}:${a.id}`)).stdout);
    expect(json.entries.map((e: { id: string }) => e.id)).toEqual([b.id]);

    const refused = await rsc('schedule', streamPrefix, '1', 'drop', b.id);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('run again with --yes');
    expect((await admin().readSchedule({ streamPrefix, shardIndex: 1 })).total).toBe(2);
    const dropped = await rsc('schedule', streamPrefix, '1', 'drop', b.id, '--yes');
    expect([dropped.code, dropped.stdout]).toEqual([0, expect.stringContaining(`dropped ${b.id}`)]);
    const again = await rsc('schedule', streamPrefix, '1', 'drop', b.id, '--yes');
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('released or dropped already?');

    const released = await rsc('schedule', streamPrefix, '1', 'release', a.id);
    expect([released.code, released.stdout]).toEqual([0, expect.stringContaining(`${a.id} is due now`)]);
    await pollUntil('the released entry handled', async () => handled.includes(1), { timeoutMs: 5_000 });
    expect(handled).toEqual([1]);

    expect((await rsc('schedule', streamPrefix, '1', 'release', 'nope')).stderr).toContain('delayed entry id "nope" is invalid');
    expect((await rsc('schedule', streamPrefix, '1', 'release', a.id, '--group', 'group')).stderr).toContain('deferred retry id');
    expect((await rsc('schedule', streamPrefix, '5', 'list')).stderr).toContain('shardIndex must be an integer from 0 to 1, got 5');
    expect((await rsc('schedule', streamPrefix, '1', 'release')).stderr).toContain("release needs the entry's ID");
    expect((await rsc('schedule', 'no-such-stream', '0', 'list')).code).toBe(1);
  });
});
