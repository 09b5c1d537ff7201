import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, type ParkedEvent, StreamProducer, type StreamMessage } from '@redis-stream-coordinator/core';
import { packFields } from '../../packages/core/src/redis/packed-fields';
import { runScript } from '../../packages/core/src/redis/scripts';
import { fenceToken, ShardClient } from '../../packages/core/src/redis/shard-client';
import type { KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { oneShardStream } from '../support/one-shard-stream';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// docs/runtime.md, Deferred retries, deferredOrder: while a key has a deferred entry on a shard, the
// group's later entries of that key there are parked behind it, durably and in order, and run after
// it settles ('key', the default); with 'none' they do not wait. Other keys never wait.

const redis = useRedisServer();
const aMember = memberFactory(redis, { blockMs: 300 });
const keys = new KeyBuilder();

const aStream = (label: string) => oneShardStream(redis, label);

/** Every handler call in order; `failures` says how many times each seq fails before it succeeds. */
function recorder(failures: Record<number, number> = {}, slow: Record<number, number> = {}) {
  const seen: { seq: number; key: string | undefined; deliveryCount: number }[] = [];
  const failed = new Map<number, number>();
  return {
    seen,
    /** The seqs of one key, in the order they were handled. */
    of: (key: string) => seen.filter((s) => s.key === key).map((s) => s.seq),
    handler: async (message: StreamMessage<KeyedPayload>) => {
      const { seq } = message.payload;
      seen.push({ seq, key: message.key, deliveryCount: message.deliveryCount });
      if (slow[seq]) await new Promise((resolve) => setTimeout(resolve, slow[seq]));
      const times = failed.get(seq) ?? 0;
      if (times < (failures[seq] ?? 0)) {
        failed.set(seq, times + 1);
        throw new Error(`fails ${seq}`);
      }
    },
  };
}

async function pendingCount(streamPrefix: string, group = 'group'): Promise<number> {
  const summary = (await redis.client().xpending(keys.shardStream(streamPrefix, 0), group)) as [number, ...unknown[]];
  return Number(summary[0]);
}

async function scheduleEmpty(streamPrefix: string, group = 'group'): Promise<boolean> {
  return (await redis.client().zcard(keys.shardDeferred(streamPrefix, 0, group))) === 0;
}

/** bad 1, good 2, bad 3, good 4, bad 5: one shard, one write. */
async function sendMixed(streamPrefix: string): Promise<void> {
  await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
    [1, 2, 3, 4, 5].map((seq) => ({ key: seq % 2 === 1 ? 'bad' : `good-${seq}`, payload: { seq } })),
  );
}

const oneWorker = { runtimeMaxConcurrency: 1, retryMode: 'deferred' as const, maxAttempts: 3 };

/** A member of one worker, started, and the mixed entries sent: the member and its `parked` events. */
async function parkingMember(streamPrefix: string, retryBackoffMs: number, handler: (m: StreamMessage<KeyedPayload>) => Promise<void>) {
  const member = aMember({ streamPrefix, ...oneWorker, retryBackoffMs, handler });
  const parked: ParkedEvent[] = [];
  member.on('parked', (event) => parked.push(event));
  await member.start();
  await sendMixed(streamPrefix);
  return { member, parked };
}

describe('deferredOrder', () => {
  it("'key' (the default): a failing key's later entries wait behind its deferred retry and run after it, in order; the other keys never wait (one worker, no lanes)", async () => {
    const streamPrefix = await aStream('order-key');
    const group = recorder({ 1: 1 });
    const { parked } = await parkingMember(streamPrefix, 1500, group.handler);
    await pollUntil('the other keys handled', async () => group.seen.filter((s) => s.key !== 'bad').length === 2);
    expect(group.of('bad')).toEqual([1]);
    // The retry and the two entries parked behind it wait in the group's schedule, visibly.
    await pollUntil('both later entries parked', async () => parked.length === 2);
    const admin = new CoordinatorAdmin(redis.client());
    expect((await admin.describeGroup(streamPrefix, 'group')).shards[0]).toMatchObject({ deferred: 1, parked: 2, pending: 0 });
    expect(parked.map((p) => p.attempts)).toEqual([0, 0]);
    await pollUntil('all handled', async () => group.seen.length === 6, { timeoutMs: 15_000 });
    expect(group.seen.map((s) => s.seq)).toEqual([1, 2, 4, 1, 3, 5]);
    expect(group.seen.filter((s) => s.key === 'bad').map((s) => s.deliveryCount)).toEqual([1, 2, 1, 1]);
    await pollUntil('everything acknowledged', async () => (await pendingCount(streamPrefix)) === 0 && (await scheduleEmpty(streamPrefix)));
    expect((await admin.describeGroup(streamPrefix, 'group')).shards[0]).toMatchObject({ deferred: 0, parked: 0 });
  });

  for (const lanes of [1, 4]) {
    it(`a key's later entries read together are asked about together: parked in a call or two, not one each, and run after its retry in order (lanes ${lanes})`, async () => {
      const streamPrefix = await aStream(`order-batched-${lanes}`);
      const group = recorder({ 1: 1 });
      const member = aMember({
        streamPrefix,
        ...oneWorker,
        lanes,
        runtimeMaxConcurrency: lanes,
        retryBackoffMs: 1500,
        handler: group.handler,
      });
      const parked: ParkedEvent[] = [];
      member.on('parked', (event) => parked.push(event));
      await member.start();
      const producer = new StreamProducer(redis.client(), { streamPrefix });
      await producer.send({ key: 'bad', payload: { seq: 1 } });
      await pollUntil('the first deferred', async () => !(await scheduleEmpty(streamPrefix)));
      // Each parkFenced call reads the key states once (HMGET), whatever it carries.
      const monitor = await redis.client().monitor();
      let parkCalls = 0;
      const states = keys.shardDeferredKeys(streamPrefix, 0, 'group');
      monitor.on('monitor', (_time: string, args: string[]) => {
        if (args[0]?.toLowerCase() === 'hmget' && args[1] === states) parkCalls += 1;
      });
      try {
        await producer.sendBatch(
          Array.from({ length: 40 }, (_, i) =>
            i % 2 === 0 ? { key: 'bad', payload: { seq: 2 + i / 2 } } : { key: `good-${i}`, payload: { seq: 100 + i } },
          ),
        );
        await pollUntil('the later bad entries parked', async () => parked.length === 20, { timeoutMs: 10_000 });
      } finally {
        monitor.disconnect();
      }
      expect(parkCalls).toBeGreaterThan(0);
      expect(parkCalls).toBeLessThanOrEqual(3);
      await pollUntil('all handled', async () => group.of('bad').length === 22, { timeoutMs: 15_000 });
      expect(group.of('bad')).toEqual([1, 1, ...Array.from({ length: 20 }, (_, i) => 2 + i)]);
      await pollUntil(
        'everything acknowledged',
        async () => (await pendingCount(streamPrefix)) === 0 && (await scheduleEmpty(streamPrefix)),
      );
    });
  }

  it("'none': the key's later entries do not wait, they run before its retry", async () => {
    const streamPrefix = await aStream('order-none');
    const group = recorder({ 1: 1 });
    await aMember({ streamPrefix, ...oneWorker, deferredOrder: 'none', retryBackoffMs: 800, handler: group.handler }).start();
    await sendMixed(streamPrefix);
    await pollUntil('all handled', async () => group.seen.length === 6, { timeoutMs: 15_000 });
    expect(group.seen.map((s) => s.seq)).toEqual([1, 2, 3, 4, 5, 1]);
    expect(await redis.client().exists(keys.shardDeferredKeys(streamPrefix, 0, 'group'))).toBe(0);
  });

  it('a key deferred twice keeps its order: its parked entries are parked again behind the second deferral', async () => {
    const streamPrefix = await aStream('order-twice');
    const group = recorder({ 1: 2 });
    await aMember({ streamPrefix, ...oneWorker, retryBackoffMs: 500, handler: group.handler }).start();
    await sendMixed(streamPrefix);
    await pollUntil('all handled', async () => group.seen.length === 7, { timeoutMs: 20_000 });
    expect(group.of('bad')).toEqual([1, 1, 1, 3, 5]);
    expect(group.seen.filter((s) => s.key === 'bad').map((s) => s.deliveryCount)).toEqual([1, 2, 3, 1, 1]);
    expect(group.seen.slice(0, 3).map((s) => s.seq)).toEqual([1, 2, 4]);
    await pollUntil('everything acknowledged', async () => (await pendingCount(streamPrefix)) === 0 && (await scheduleEmpty(streamPrefix)));
  });

  it("an entry read before its key's release and handled after it (below the barrier) is appended again and runs after the released retry", async () => {
    const streamPrefix = await aStream('order-barrier');
    // bad 1 fails and is deferred 200 ms; slow 2 holds the shard 1.5 s; bad 3 waits in the buffer
    // meanwhile, read before the release, while its key counts nothing any more.
    const group = recorder({ 1: 1 }, { 2: 1500 });
    await aMember({ streamPrefix, ...oneWorker, retryBackoffMs: 200, handler: group.handler }).start();
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch([
      { key: 'bad', payload: { seq: 1 } },
      { key: 'slow', payload: { seq: 2 } },
      { key: 'bad', payload: { seq: 3 } },
    ]);
    await pollUntil('all handled', async () => group.seen.length === 4, { timeoutMs: 15_000 });
    expect(group.of('bad')).toEqual([1, 1, 3]);
    await pollUntil('everything acknowledged', async () => (await pendingCount(streamPrefix)) === 0 && (await scheduleEmpty(streamPrefix)));
  });

  it('a released retry that fails again while an entry of its key was appended again behind it retries in place: a later deferral would come out after that entry', async () => {
    const streamPrefix = await aStream('order-barrier-busy');
    const group = recorder({ 1: 2 }, { 2: 1500 });
    const member = aMember({ streamPrefix, ...oneWorker, retryBackoffMs: 200, handler: group.handler });
    const deferred: number[] = [];
    member.on('deferred', (event) => deferred.push(event.attempts));
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch([
      { key: 'bad', payload: { seq: 1 } },
      { key: 'slow', payload: { seq: 2 } },
      { key: 'bad', payload: { seq: 3 } },
    ]);
    await pollUntil('all handled', async () => group.seen.length === 5, { timeoutMs: 15_000 });
    expect(group.of('bad')).toEqual([1, 1, 1, 3]);
    expect(deferred).toEqual([1]); // the second retry ran in place
    await pollUntil('everything acknowledged', async () => (await pendingCount(streamPrefix)) === 0 && (await scheduleEmpty(streamPrefix)));
  });

  it('more of a key than one release call moves (256) come back in order, its released entries waiting for the rest', async () => {
    const streamPrefix = await aStream('order-partial');
    const group = recorder({ 1: 1 });
    await aMember({ streamPrefix, ...oneWorker, batchSize: 500, retryBackoffMs: 3000, handler: group.handler }).start();
    const seqs = Array.from({ length: 300 }, (_, i) => i + 1);
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(seqs.map((seq) => ({ key: 'bad', payload: { seq } })));
    await pollUntil('all handled', async () => group.seen.length === 301, { timeoutMs: 30_000 });
    expect(group.of('bad')).toEqual([1, ...seqs]);
    await pollUntil('everything acknowledged', async () => (await pendingCount(streamPrefix)) === 0 && (await scheduleEmpty(streamPrefix)));
  });

  it('a handoff while a key is parked: the next owner releases and runs it in order', async () => {
    const streamPrefix = await aStream('order-handoff');
    const first = recorder({ 1: 1 });
    const { member: a, parked } = await parkingMember(streamPrefix, 2000, first.handler);
    await pollUntil('parked at the first member', async () => parked.length === 2);
    const second = recorder();
    const b = aMember({ streamPrefix, ...oneWorker, retryBackoffMs: 2000, handler: second.handler });
    await b.start();
    await a.stop(); // the shard goes to b, the key still parked
    await pollUntil('handled by the second member', async () => second.seen.length === 3, { timeoutMs: 20_000 });
    expect(first.of('bad')).toEqual([1]);
    expect(second.seen.map((s) => s.seq)).toEqual([1, 3, 5]);
    await pollUntil('everything acknowledged', async () => (await pendingCount(streamPrefix)) === 0 && (await scheduleEmpty(streamPrefix)));
  });

  it('two groups: only the deferring group parks; the other handles the key in order at once and acknowledges the released copies unhandled', async () => {
    const streamPrefix = await aStream('order-groups');
    const deferring = recorder({ 1: 1 });
    const other = recorder();
    await aMember({ streamPrefix, ...oneWorker, retryBackoffMs: 1500, handler: deferring.handler }).start();
    await aMember({ streamPrefix, ...oneWorker, consumerGroup: 'other', handler: other.handler }).start();
    await sendMixed(streamPrefix);
    await pollUntil('the other group handled all', async () => other.seen.length === 5);
    expect(other.seen.map((s) => s.seq)).toEqual([1, 2, 3, 4, 5]);
    const admin = new CoordinatorAdmin(redis.client());
    expect((await admin.describeGroup(streamPrefix, 'other')).shards[0]).toMatchObject({ deferred: 0, parked: 0 });
    await pollUntil('the deferring group handled all', async () => deferring.seen.length === 6, { timeoutMs: 15_000 });
    expect(deferring.of('bad')).toEqual([1, 1, 3, 5]);
    await pollUntil('the other group acknowledged the copies', async () => (await pendingCount(streamPrefix, 'other')) === 0);
    expect(other.seen).toHaveLength(5);
    // The parked copies never ran, yet carry a positive `a` (1, with `q` 2: attempts 0), so that a
    // member of a version that knows only deferrals acknowledges them unhandled in other groups too.
    const copies = (await redis.client().xrange(keys.shardStream(streamPrefix, 0), '-', '+')).slice(5).map(([, fields]) => {
      const byName = new Map<string, string>();
      for (let i = 0; i + 1 < fields.length; i += 2) byName.set(fields[i], fields[i + 1]);
      return [(JSON.parse(byName.get('p')!) as KeyedPayload).seq, byName.get('g'), byName.get('a'), byName.get('q')];
    });
    expect(copies).toEqual([
      [1, 'group', '1', undefined],
      [3, 'group', '1', '2'],
      [5, 'group', '1', '2'],
    ]);
  });

  it('a park that fails (WRONGTYPE) is retried while the shard is owned, visibly (a problems line), and lands in order once Redis takes it', async () => {
    const streamPrefix = await aStream('order-park-fails');
    const group = recorder({ 1: 1 });
    const member = aMember({ streamPrefix, ...oneWorker, retryBackoffMs: 1500, handler: group.handler });
    await member.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ key: 'bad', payload: { seq: 1 } });
    await pollUntil('deferred', async () => !(await scheduleEmpty(streamPrefix)));
    // The deferred entries' hash replaced by a string: the park's schedule write fails, as an OOM would.
    const entries = keys.shardDeferredEntries(streamPrefix, 0, 'group');
    await redis.client().rename(entries, `${entries}.aside`);
    await redis.client().set(entries, 'not a hash');
    const { id } = await producer.send({ key: 'bad', payload: { seq: 3 } });
    await pollUntil('the park failing, visibly', async () =>
      member.stats().problems.some((line) => line.includes(`keeping ${id} behind its key's deferred entries failed`)),
    );
    expect(await pendingCount(streamPrefix)).toBe(1); // nothing acknowledged
    await redis.client().del(entries);
    await redis.client().rename(`${entries}.aside`, entries);
    await pollUntil('all handled', async () => group.seen.length === 3, { timeoutMs: 15_000 });
    expect(group.of('bad')).toEqual([1, 1, 3]);
    expect(member.stats().problems).toEqual([]);
  });

  it('past MIRRORED_KEY_STATES_MAX key states a member asks Redis about the keys it does not hold, and handles them', async () => {
    const streamPrefix = await aStream('order-mirror-cap');
    // 5,000 keys each with a copy appended long ago (their barrier), nothing waiting.
    const states = Array.from({ length: 5000 }, (_, i) => [`kold-${i}`, '0|0|0|1-1|1-1|1-1']).flat();
    await redis.client().hset(keys.shardDeferredKeys(streamPrefix, 0, 'group'), ...states);
    const group = recorder({ 1: 1 });
    await aMember({ streamPrefix, ...oneWorker, retryBackoffMs: 300, handler: group.handler }).start();
    await sendMixed(streamPrefix);
    await pollUntil('all handled', async () => group.seen.length === 6, { timeoutMs: 15_000 });
    expect(group.seen.map((s) => s.seq)).toEqual([1, 2, 4, 1, 3, 5]);
  });

  it('a zombie cannot park: its token is refused, nothing is scheduled and the entry stays pending for the owner', async () => {
    const streamPrefix = await aStream('order-zombie');
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    await aMember({ streamPrefix, ...oneWorker, handler: () => held }).start();
    const { id } = await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 1 } });
    await pollUntil('the entry pending at the owner', async () => (await pendingCount(streamPrefix)) === 1);
    // A key with a deferral, so that the park would be written were the token good.
    await redis.client().hset(keys.shardDeferredKeys(streamPrefix, 0, 'group'), 'kk', '1|0|0|||');
    const zombie = new ShardClient(redis.client(), keys, streamPrefix, 'group', 'zombie-member');
    expect(await zombie.park(0, 1, { id, fields: ['p', '{"seq":1}', 'k', 'k'] }, 0, 'kk', 'original')).toBeNull();
    expect(await scheduleEmpty(streamPrefix)).toBe(true);
    expect(await pendingCount(streamPrefix)).toBe(1);
    release();
    await pollUntil('the owner acknowledged it', async () => (await pendingCount(streamPrefix)) === 0);
  });

  it('a park sent again after its first run landed writes nothing twice: its answer says so, and the schedule, key state and parked count are as after the first', async () => {
    const streamPrefix = await aStream('order-park-resent');
    const stream = keys.shardStream(streamPrefix, 0);
    await redis.client().xgroup('CREATE', stream, 'group', '0', 'MKSTREAM');
    const { id } = await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 1 } });
    await redis.client().xreadgroup('GROUP', 'group', 'owner', 'STREAMS', stream, '>');
    await redis.client().set(keys.shardFence(streamPrefix, 0, 'group'), fenceToken('0', 1, 'owner'));
    const states = keys.shardDeferredKeys(streamPrefix, 0, 'group');
    await redis.client().hset(states, 'kk', '1|0|0|||');
    const owner = new ShardClient(redis.client(), keys, streamPrefix, 'group', 'owner');
    const entry = { id, fields: ['p', '{"seq":1}', 'k', 'k'] };
    const sideState = async () => ({
      scheduled: await redis.client().zcard(keys.shardDeferred(streamPrefix, 0, 'group')),
      fields: (await redis.client().hkeys(keys.shardDeferredEntries(streamPrefix, 0, 'group'))).filter((f) => !f.startsWith('#')).length,
      state: await redis.client().hget(states, 'kk'),
      parked: await redis.client().hget(states, '#parked'),
      pending: await pendingCount(streamPrefix),
    });
    expect((await owner.park(0, 1, entry, 0, 'kk', 'original'))?.outcome).toBe('park');
    const first = await sideState();
    expect(first).toEqual({ scheduled: 1, fields: 2, state: '2|0|0|||', parked: '1', pending: 0 });
    expect((await owner.park(0, 1, entry, 0, 'kk', 'original'))?.outcome).toBe('');
    expect(await sideState()).toEqual(first);
  });

  /** A stream with its group, `count` entries of key `k` read by `owner` (pending), its token set: the entries. */
  async function ownedEntries(label: string, count: number) {
    const streamPrefix = await aStream(label);
    const stream = keys.shardStream(streamPrefix, 0);
    await redis.client().xgroup('CREATE', stream, 'group', '0', 'MKSTREAM');
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const entries: { id: string; fields: string[] }[] = [];
    for (let seq = 1; seq <= count; seq++) {
      const { id } = await producer.send({ key: 'k', payload: { seq } });
      entries.push({ id, fields: ['p', JSON.stringify({ seq }), 'k', 'k'] });
    }
    await redis.client().xreadgroup('GROUP', 'group', 'owner', 'STREAMS', stream, '>');
    await redis.client().set(keys.shardFence(streamPrefix, 0, 'group'), fenceToken('0', 1, 'owner'));
    return { streamPrefix, stream, entries, owner: new ShardClient(redis.client(), keys, streamPrefix, 'group', 'owner') };
  }

  /** Calls of each named command since `before` (INFO commandstats; a script's own commands count). */
  async function callsSince(before: Map<string, number>): Promise<Map<string, number>> {
    const now = await commandCalls();
    return new Map([...now].map(([name, calls]) => [name, calls - (before.get(name) ?? 0)]));
  }
  async function commandCalls(): Promise<Map<string, number>> {
    const info = await redis.client().info('commandstats');
    return new Map([...info.matchAll(/^cmdstat_(\w+):calls=(\d+)/gm)].map((m) => [m[1], Number(m[2])]));
  }

  it("parks asked in one turn go in one call, decided in the order asked: the key's sequence, state and parked count read and written once", async () => {
    const { streamPrefix, entries, owner } = await ownedEntries('order-park-turn', 5);
    const states = keys.shardDeferredKeys(streamPrefix, 0, 'group');
    await redis.client().hset(states, 'kk', '1|0|0|||');
    const before = await commandCalls();
    const outcomes = await Promise.all(entries.map((entry) => owner.park(0, 1, entry, 0, 'kk', 'original')));
    const calls = await callsSince(before);
    expect(outcomes.map((o) => [o?.outcome, o?.keyState.count])).toEqual([
      ['park', 2],
      ['park', 3],
      ['park', 4],
      ['park', 5],
      ['park', 6],
    ]);
    expect((calls.get('evalsha') ?? 0) + (calls.get('eval') ?? 0)).toBe(1);
    expect([calls.get('hincrby'), calls.get('hmget'), calls.get('xack'), calls.get('zadd')]).toEqual([1, 1, 5, 5]);
    expect(await redis.client().hget(states, 'kk')).toBe('6|0|0|||');
    expect(await redis.client().hget(states, '#parked')).toBe('5');
    // In the schedule in the order asked (one due time: members sort as strings, the sequence).
    const scheduled = await redis.client().zrange(keys.shardDeferred(streamPrefix, 0, 'group'), '0', '-1');
    const entriesKey = keys.shardDeferredEntries(streamPrefix, 0, 'group');
    const seqs = [];
    for (const id of scheduled)
      seqs.push(JSON.parse(String((await redis.client().hgetBuffer(entriesKey, id))?.toString('latin1').match(/\{"seq":\d+\}/)?.[0])).seq);
    expect(seqs).toEqual([1, 2, 3, 4, 5]);
    expect(await redis.client().hget(entriesKey, '#seq')).toBe('5');
    expect(await pendingCount(streamPrefix)).toBe(0);
  });

  it("a write that fails part way through a turn's call: the entries before it stand, their key's state written; it and the ones after it stay pending, each told Redis' error", async () => {
    const { streamPrefix, entries, owner } = await ownedEntries('order-park-turn-fails', 3);
    const states = keys.shardDeferredKeys(streamPrefix, 0, 'group');
    // Key kk appended again (its barrier after the first entry): the first is appended again; key kj
    // has a deferral, so its entries park, and the schedule is not a sorted set: their write fails.
    await redis.client().hset(states, 'kk', `0|0|0|||${entries[2].id}`, 'kj', '1|0|0|||');
    await redis.client().set(keys.shardDeferred(streamPrefix, 0, 'group'), 'not a schedule');
    const asked = [
      owner.park(0, 1, entries[0], 0, 'kk', 'original'),
      owner.park(0, 1, entries[1], 0, 'kj', 'original'),
      owner.park(0, 1, entries[2], 0, 'kk', 'original'),
    ].map((call) =>
      call.then(
        (answer) => answer?.outcome ?? null,
        (error: Error) => error.message,
      ),
    );
    const [first, second, third] = await Promise.all(asked);
    expect(first).toBe('reappend');
    expect(second).toMatch(/WRONGTYPE/);
    expect(third).toMatch(/WRONGTYPE/);
    const state = await redis.client().hget(states, 'kk');
    const appended = (await redis.client().xrange(keys.shardStream(streamPrefix, 0), '-', '+')).at(-1)![0];
    expect(state).toBe(`0|0|0|||${appended}`);
    expect(await redis.client().hget(states, 'kj')).toBe('1|0|0|||');
    expect(await pendingCount(streamPrefix)).toBe(2);
  });

  it('parkFenced refuses a call of no entries, of values not in fours, or of more than 256 entries, naming what it got', async () => {
    const { streamPrefix, stream } = await ownedEntries('order-park-bounds', 1);
    const keysOf = [
      stream,
      keys.shardFence(streamPrefix, 0, 'group'),
      keys.shardDeferred(streamPrefix, 0, 'group'),
      keys.shardDeferredEntries(streamPrefix, 0, 'group'),
      keys.shardDeferredKeys(streamPrefix, 0, 'group'),
    ];
    const token = fenceToken('0', 1, 'owner');
    const call = (values: string[]) => runScript(redis.client(), 'parkFenced', keysOf, ['group', token, ...values]);
    await expect(call([])).rejects.toThrow(/1 to 256 entries of four values each, got 0 values/);
    await expect(call(['1-1', 'kk', 'o'])).rejects.toThrow(/got 3 values/);
    const packed = packFields(['p', '{}', 'k', 'k']).toString('latin1');
    await expect(call(Array.from({ length: 257 }, (_, i) => [`1-${i}`, 'kk', 'o', packed]).flat())).rejects.toThrow(/got 1028 values/);
  });

  it('a deferral sent again after its first run landed writes nothing twice, counted in its key or not', async () => {
    for (const keyField of ['kk', undefined]) {
      const streamPrefix = await aStream('order-defer-resent');
      const stream = keys.shardStream(streamPrefix, 0);
      await redis.client().xgroup('CREATE', stream, 'group', '0', 'MKSTREAM');
      const { id } = await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 1 } });
      await redis.client().xreadgroup('GROUP', 'group', 'owner', 'STREAMS', stream, '>');
      await redis.client().set(keys.shardFence(streamPrefix, 0, 'group'), fenceToken('0', 1, 'owner'));
      const owner = new ShardClient(redis.client(), keys, streamPrefix, 'group', 'owner');
      const entry = { id, fields: ['p', '{"seq":1}', 'k', 'k'] };
      const sideState = async () => ({
        scheduled: await redis.client().zcard(keys.shardDeferred(streamPrefix, 0, 'group')),
        fields: (await redis.client().hkeys(keys.shardDeferredEntries(streamPrefix, 0, 'group'))).filter((f) => !f.startsWith('#')).length,
        states: await redis.client().hgetall(keys.shardDeferredKeys(streamPrefix, 0, 'group')),
        pending: await pendingCount(streamPrefix),
      });
      expect(typeof (await owner.defer(0, 1, entry, 1, 60_000, keyField))?.dueAt).toBe('number');
      const first = await sideState();
      expect(first).toMatchObject({ scheduled: 1, fields: keyField ? 2 : 1, pending: 0 });
      expect((await owner.defer(0, 1, entry, 1, 60_000, keyField))?.dueAt).toBe('');
      expect(await sideState()).toEqual(first);
    }
  });

  it("is 'key' or 'none', refused otherwise naming the option and the value", () => {
    const streamPrefix = uniqueName('order-options');
    expect(() => aMember({ streamPrefix, deferredOrder: 'sometimes' as never, handler: () => undefined })).toThrow(
      `deferredOrder must be 'key' or 'none', got "sometimes"`,
    );
  });
});

// docs/operations.md, Schedules: the admin's changes to a deferred schedule keep a key's deferral and
// its parked entries in step (dropScheduled-3.lua, makeScheduledDue-3.lua).
describe('deferredOrder and the admin schedules', () => {
  /** bad 1 fails once and is deferred 9 s (long past the waits below); bad 3 and bad 5 park behind it: the deferral's and the parked entries' ids. */
  async function parkedBehind(label: string) {
    const streamPrefix = await aStream(label);
    const group = recorder({ 1: 1 });
    const { member, parked } = await parkingMember(streamPrefix, 9_000, group.handler);
    await pollUntil('both later entries parked', async () => parked.length === 2 && group.seen.length === 3);
    const admin = new CoordinatorAdmin(redis.client());
    const target = { streamPrefix, shardIndex: 0, consumerGroup: 'group' };
    const ids = (await admin.readSchedule(target)).entries.map((e) => e.id);
    expect(ids).toHaveLength(3);
    expect(ids.filter((id) => id.endsWith('p'))).toHaveLength(2);
    return {
      streamPrefix,
      group: { ...group, member },
      admin,
      target,
      deferral: ids.find((id) => !id.endsWith('p'))!,
      parkedIds: ids.filter((id) => id.endsWith('p')),
    };
  }

  async function settled(streamPrefix: string): Promise<void> {
    await pollUntil('everything acknowledged', async () => (await pendingCount(streamPrefix)) === 0 && (await scheduleEmpty(streamPrefix)));
    // Nothing of the key is counted any more: no key stays blocked.
    const states = await redis.client().hgetall(keys.shardDeferredKeys(streamPrefix, 0, 'group'));
    expect(Object.entries(states).filter(([field, state]) => !field.startsWith('#') && !state.startsWith('0|'))).toEqual([]);
  }

  it("releasing a deferral (make due now) makes its key's parked entries due with it, in order: its copy does not wait for their old due time", async () => {
    const { streamPrefix, group, admin, target, deferral } = await parkedBehind('admin-release');
    const made = await admin.releaseScheduled(target, deferral);
    expect(made).toMatchObject({ found: true, madeDue: true, keyEntriesMadeDue: 2 });
    await pollUntil('all handled', async () => group.seen.length === 6, { timeoutMs: 4_000 });
    expect(group.seen.map((s) => s.seq)).toEqual([1, 2, 4, 1, 3, 5]);
    await settled(streamPrefix);
  });

  it('releasing a parked entry brings its deferral and the other parked entries with it, in their order', async () => {
    const { streamPrefix, group, admin, target, parkedIds } = await parkedBehind('admin-release-parked');
    expect(await admin.releaseScheduled(target, parkedIds[1])).toMatchObject({ madeDue: true, keyEntriesMadeDue: 2 });
    await pollUntil('all handled', async () => group.seen.length === 6, { timeoutMs: 4_000 });
    expect(group.seen.map((s) => s.seq)).toEqual([1, 2, 4, 1, 3, 5]);
    await settled(streamPrefix);
  });

  it('releaseAllScheduled makes a key due as a whole: its copies run at once, in order', async () => {
    const { streamPrefix, group, admin } = await parkedBehind('admin-release-all');
    expect(await admin.releaseAllScheduled({ streamPrefix, consumerGroup: 'group' })).toBe(3);
    await pollUntil('all handled', async () => group.seen.length === 6, { timeoutMs: 4_000 });
    expect(group.seen.map((s) => s.seq)).toEqual([1, 2, 4, 1, 3, 5]);
    await settled(streamPrefix);
  });

  it('dropping a deferral counts it out of its key and makes the entries parked behind it due now, in order; nothing else of the key is lost', async () => {
    const { streamPrefix, group, admin, target, deferral } = await parkedBehind('admin-drop');
    const dropped = await admin.dropScheduled(target, deferral);
    expect(dropped).toMatchObject({ id: deferral, dropped: true, parkedMadeDue: 2 });
    await pollUntil('the parked entries handled', async () => group.seen.length === 5, { timeoutMs: 4_000 });
    expect(group.seen.map((s) => s.seq)).toEqual([1, 2, 4, 3, 5]);
    await settled(streamPrefix);
    // The key is not blocked: a later entry of it runs at once.
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'bad', payload: { seq: 7 } });
    await pollUntil('a later entry of the key handled', async () => group.seen.length === 6);
  });

  it("a parked entry whose fields were deleted from outside is counted out of its key when due, visibly: the key's other entries still run in order, and the key is free after", async () => {
    const { streamPrefix, group, admin, parkedIds } = await parkedBehind('lost-parked');
    expect(await redis.client().hdel(keys.shardDeferredEntries(streamPrefix, 0, 'group'), parkedIds[0])).toBe(1);
    const errors: Error[] = [];
    group.member.on('error', (error) => errors.push(error));
    expect(await admin.releaseAllScheduled({ streamPrefix, consumerGroup: 'group' })).toBe(3);
    await pollUntil('the key handled', async () => group.seen.length === 5, { timeoutMs: 4_000 });
    expect(group.seen.map((s) => s.seq)).toEqual([1, 2, 4, 1, 5]);
    await settled(streamPrefix);
    expect(errors.map((e) => e.message)).toEqual([
      expect.stringContaining(`deferred or parked entries ${parkedIds[0]} of group group were due without their fields`),
    ]);
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'bad', payload: { seq: 7 } });
    await pollUntil('a later entry of the key handled', async () => group.seen.length === 6);
  });

  it('dropping a parked entry counts it out: the deferral and the other parked entry still come out in order, and the key is free after', async () => {
    const { streamPrefix, group, admin, target, deferral, parkedIds } = await parkedBehind('admin-drop-parked');
    expect(await admin.dropScheduled(target, parkedIds[0])).toMatchObject({ dropped: true, parkedMadeDue: 0 });
    expect((await admin.describeGroup(streamPrefix, 'group')).shards[0]).toMatchObject({ deferred: 1, parked: 1 });
    await admin.releaseScheduled(target, deferral);
    await pollUntil('all handled', async () => group.seen.length === 5, { timeoutMs: 4_000 });
    expect(group.seen.map((s) => s.seq)).toEqual([1, 2, 4, 1, 5]);
    await settled(streamPrefix);
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'bad', payload: { seq: 7 } });
    await pollUntil('a later entry of the key handled', async () => group.seen.length === 6);
  });
});
