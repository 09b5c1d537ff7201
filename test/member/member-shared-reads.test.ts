import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import { EventEmitter } from 'node:events';
import type { ShardError } from '@redis-stream-coordinator/core';
import { AckBatcher, type AckOutcome } from '../../packages/core/src/member/handle/ack-batcher';
import type { PollerEvents, ShardState } from '../../packages/core/src/member/shard-state';
import { type ShardAck, ShardClient } from '../../packages/core/src/redis/shard-client';
import { HandlerRecorder } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { TcpProxy } from '../support/tcp-proxy';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// Every member of a process reads through one ReadHub per client (docs/runtime.md, Connections), so a process
// holds O(nodes) connections, not O(members): a member alone on it reads with a blocking
// XREADGROUP on the hub's blocking connection; two or more share a doorbell (that connection) and
// one read connection.
const redis = useRedisServer();
const aMember = memberFactory(redis, { sweepIntervalMs: 500 });
const aProxy = proxyFactory(redis);
const keys = new KeyBuilder();

/** A client whose connections (and their duplicates: subscriber, doorbell, reads) carry `name`. */
function aNamedClient(name: string, url = redis.server.url): Redis {
  return redis.clientAt(url, { connectionName: name });
}

async function connectionsNamed(name: string): Promise<number> {
  const list = String(await redis.client().client('LIST'));
  return list.split('\n').filter((line) => line.includes(` name=${name} `)).length;
}

async function settled(streamPrefix: string) {
  return pollUntil(`every shard of ${streamPrefix} acknowledged`, async () => {
    const { shards } = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
    return shards.every((s) => s.pending === 0 && s.lag === 0);
  });
}

/** How many times Redis ran `command` so far (INFO commandstats; a script's own calls count too). */
async function commandCalls(command: string): Promise<number> {
  const line = String(await redis.client().info('commandstats'))
    .split('\n')
    .find((l) => l.startsWith(`cmdstat_${command}:`));
  return Number(/calls=(\d+)/.exec(line ?? '')?.[1] ?? 0);
}

function send(streamPrefix: string, from: number, count: number) {
  return new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
    Array.from({ length: count }, (_, i) => ({ key: `k${(from + i) % 16}`, payload: { seq: from + i } })),
  );
}

describe('connections per process', () => {
  it.each([
    [1, 3],
    [8, 4],
    [24, 4],
  ])(
    '%i member(s) on one client: %i connections (command, wake-ups, blocking/doorbell, shared reads), not one reader each',
    async (count, expected) => {
      const streamPrefix = uniqueName(`conn-${count}`);
      const name = uniqueName('proc').replace(/-/g, '_');
      const client = aNamedClient(name);
      const recorder = new HandlerRecorder();
      const members = Array.from({ length: count }, (_, i) =>
        aMember({ streamPrefix, memberId: `m${i}`, shardCount: 32, handler: recorder.handler(`m${i}`) }, client),
      );
      await Promise.all(members.map((m) => m.start()));
      await send(streamPrefix, 0, 64);
      await pollUntil('every entry handled', async () => recorder.distinctEntries() === 64);
      // (Before the read hub: 2 + count, one blocking reader per member.)
      expect(await connectionsNamed(name)).toBe(expected);
    },
  );
});

describe('a member alone on its hub, and then not', () => {
  it('a second member joining a solo reader blocked in its read takes over the connection as the doorbell; both read; alone again, the first reads solo', async () => {
    const streamPrefix = uniqueName('solo-shared');
    const name = uniqueName('mode').replace(/-/g, '_');
    const client = aNamedClient(name);
    const recorder = new HandlerRecorder();
    const first = aMember({ streamPrefix, memberId: 'm0', shardCount: 4, handler: recorder.handler('m0') }, client);
    await first.start();
    await pollUntil('m0 owns every shard', async () => first.ownedShards().length === 4);
    await send(streamPrefix, 0, 8);
    await pollUntil('8 handled', async () => recorder.distinctEntries() === 8);
    expect(await connectionsNamed(name)).toBe(3);

    const second = aMember({ streamPrefix, memberId: 'm1', shardCount: 4, handler: recorder.handler('m1') }, client);
    await second.start();
    await pollUntil('each owns two shards', async () => first.ownedShards().length === 2 && second.ownedShards().length === 2);
    await send(streamPrefix, 8, 32);
    await pollUntil('40 handled', async () => recorder.distinctEntries() === 40, { timeoutMs: 8000 });
    expect(new Set(recorder.runs.filter((r) => r.seq >= 8).map((r) => r.memberId))).toEqual(new Set(['m0', 'm1']));
    expect(await connectionsNamed(name)).toBe(4);

    await second.stop();
    await pollUntil('m0 owns every shard again', async () => first.ownedShards().length === 4);
    await send(streamPrefix, 40, 16);
    await pollUntil('56 handled', async () => recorder.distinctEntries() === 56, { timeoutMs: 8000 });
    await settled(streamPrefix);
    expect(recorder.duplicates()).toEqual([]);
  });
});

describe('members of one process reading together', () => {
  it('a lost reply on the shared read connection, and a lost doorbell reply, strand nothing for any member', async () => {
    const streamPrefix = uniqueName('shared-lost');
    const proxy = await aProxy();
    const client = aNamedClient(uniqueName('lost'), proxy.url);
    const recorder = new HandlerRecorder();
    const members = Array.from({ length: 4 }, (_, i) =>
      aMember({ streamPrefix, memberId: `m${i}`, shardCount: 8, handler: recorder.handler(`m${i}`) }, client),
    );
    await Promise.all(members.map((m) => m.start()));
    await pollUntil('every member owns shards', async () => members.every((m) => m.ownedShards().length === 2));
    await send(streamPrefix, 0, 32);
    await pollUntil('the first 32 handled', async () => recorder.distinctEntries() === 32);

    // Every shard is read to the end and watched: the next entries ring the doorbell, the members
    // read together, and the reply of those reads (all of them: the connection is cut) never comes.
    const readLost = proxy.dropNextReply(TcpProxy.command('XREADGROUP'));
    await send(streamPrefix, 32, 32);
    await readLost;
    await pollUntil('64 handled', async () => recorder.distinctEntries() === 64, { timeoutMs: 8000 });

    // A doorbell reply that carries a ring is lost too. The doorbell read under way was sent before
    // the rule: it rings for 64..95, and the next one (sent after those were read) loses its reply.
    const ringLost = proxy.dropNextReply((request) => TcpProxy.command('XREAD')(request) && !TcpProxy.command('XREADGROUP')(request));
    await send(streamPrefix, 64, 32);
    await pollUntil('96 handled', async () => recorder.distinctEntries() === 96, { timeoutMs: 8000 });
    await send(streamPrefix, 96, 32);
    await ringLost;
    await pollUntil('128 handled', async () => recorder.distinctEntries() === 128, { timeoutMs: 8000 });
    await settled(streamPrefix);
    expect(recorder.duplicates()).toEqual([]);
  });

  it('a shared read held past its deadline: the read connection is reset, the members read on, nothing is lost or run twice', async () => {
    const streamPrefix = uniqueName('shared-deadline');
    const proxy = await aProxy();
    const client = aNamedClient(uniqueName('deadline'), proxy.url);
    const recorder = new HandlerRecorder();
    // sessionTimeoutMs 3000, blockMs 2000: a read's deadline is 2 s.
    const members = Array.from({ length: 2 }, (_, i) =>
      aMember(
        { streamPrefix, memberId: `m${i}`, shardCount: 4, sessionTimeoutMs: 3000, blockMs: 2000, handler: recorder.handler(`m${i}`) },
        client,
      ),
    );
    const deadlines: string[] = [];
    for (const m of members)
      m.on('error', (error) => void (/did not come back within/.test(error.message) && deadlines.push(error.message)));
    await Promise.all(members.map((m) => m.start()));
    await pollUntil('each owns two shards', async () => members.every((m) => m.ownedShards().length === 2));
    await send(streamPrefix, 0, 8);
    await pollUntil('8 handled', async () => recorder.distinctEntries() === 8);

    // The next read on the shared connection (and what follows it there) stops at the proxy.
    const held = proxy.holdNextRequest(TcpProxy.command('XREADGROUP'));
    await send(streamPrefix, 8, 8);
    await held.arrived;
    await pollUntil('the read deadline fired', async () => deadlines.length > 0, { timeoutMs: 6000 });
    expect(deadlines[0]).toMatch(/the read did not come back within 2000 ms; the reader connection was reset/);
    await pollUntil('16 handled', async () => recorder.distinctEntries() === 16, { timeoutMs: 8000 });
    held.release();
    await send(streamPrefix, 16, 8);
    await pollUntil('24 handled', async () => recorder.distinctEntries() === 24, { timeoutMs: 8000 });
    await settled(streamPrefix);
    expect(recorder.duplicates()).toEqual([]);
  });

  it('a revocation waits for the shared read under way that covers the shard before it is reported', async () => {
    const streamPrefix = uniqueName('shared-revoke');
    const proxy = await aProxy();
    const client = aNamedClient(uniqueName('revoke'), proxy.url);
    const recorder = new HandlerRecorder();
    const options = { shardCount: 2, sessionTimeoutMs: 3000, blockMs: 2000 };
    const reader = aMember({ streamPrefix, memberId: 'reader-a', ...options, handler: recorder.handler('reader-a') }, client);
    // An idle member of another group on the same client: reader-a reads through the shared path.
    const companion = aMember(
      { streamPrefix: `${streamPrefix}-other`, memberId: 'companion', ...options, handler: () => undefined },
      client,
    );
    await Promise.all([companion.start(), reader.start()]);
    await pollUntil('reader-a owns both shards', async () => reader.ownedShards().length === 2);
    await send(streamPrefix, 0, 8);
    await pollUntil('8 handled', async () => recorder.distinctEntries() === 8);

    // Both shards are watched: new entries ring the doorbell, and reader-a's read of them stops at the proxy.
    const held = proxy.holdNextRequest(TcpProxy.command('XREADGROUP', 'reader-a'));
    const events: string[] = [];
    reader.on('error', (error) => void (/did not come back within/.test(error.message) && events.push('read ended')));
    reader.on('revoked', () => void events.push('revoked'));
    await send(streamPrefix, 8, 8);
    await held.arrived;
    const heir = aMember({ streamPrefix, memberId: 'heir', ...options, handler: recorder.handler('heir') });
    await heir.start();
    await pollUntil('the heir owns a shard', async () => heir.ownedShards().length === 1, { timeoutMs: 10_000 });
    // The revoked shard was covered by the held read: its revocation came after that read ended (at its deadline).
    expect(events.slice(0, 2)).toEqual(['read ended', 'revoked']);
    held.release();
    await send(streamPrefix, 16, 8);
    await pollUntil('24 handled', async () => recorder.distinctEntries() === 24, { timeoutMs: 8000 });
    await settled(streamPrefix);
  });

  it('a doorbell read stuck on its way: watched shards are read again after blockMs without a read, nothing waits for the ring', async () => {
    const streamPrefix = uniqueName('shared-bell');
    const proxy = await aProxy();
    const client = aNamedClient(uniqueName('bell'), proxy.url);
    const recorder = new HandlerRecorder();
    // The first doorbell read (XREAD, not XREADGROUP) stops at the proxy: no ring comes.
    const held = proxy.holdNextRequest((request) => TcpProxy.command('XREAD')(request) && !TcpProxy.command('XREADGROUP')(request));
    const members = Array.from({ length: 2 }, (_, i) =>
      aMember({ streamPrefix, memberId: `m${i}`, shardCount: 4, blockMs: 1000, handler: recorder.handler(`m${i}`) }, client),
    );
    await Promise.all(members.map((m) => m.start()));
    await pollUntil('each owns two shards', async () => members.every((m) => m.ownedShards().length === 2));
    await held.arrived;
    await send(streamPrefix, 0, 8);
    await pollUntil('8 handled without a ring', async () => recorder.distinctEntries() === 8, { timeoutMs: 5000 });
    held.release();
    await send(streamPrefix, 8, 8);
    await pollUntil('16 handled', async () => recorder.distinctEntries() === 16, { timeoutMs: 5000 });
    await settled(streamPrefix);
    expect(recorder.duplicates()).toEqual([]);
  });

  it('one member stops while the others of its process keep reading; the last one to stop closes the read connections', async () => {
    const streamPrefix = uniqueName('shared-stop');
    const name = uniqueName('stop').replace(/-/g, '_');
    const client = aNamedClient(name);
    const recorder = new HandlerRecorder();
    const members = Array.from({ length: 4 }, (_, i) =>
      aMember({ streamPrefix, memberId: `m${i}`, shardCount: 8, handler: recorder.handler(`m${i}`) }, client),
    );
    await Promise.all(members.map((m) => m.start()));
    await pollUntil('every member owns shards', async () => members.every((m) => m.ownedShards().length === 2));
    await send(streamPrefix, 0, 30);
    await pollUntil('the first 30 handled', async () => recorder.distinctEntries() === 30);

    await members[0].stop();
    // Three members left: still the hub's two (before the read hub: 2 + 3).
    expect(await connectionsNamed(name)).toBe(4);
    await pollUntil('the others own every shard', async () => members.slice(1).reduce((n, m) => n + m.ownedShards().length, 0) === 8);
    await send(streamPrefix, 30, 30);
    await pollUntil('all 60 handled', async () => recorder.distinctEntries() === 60);
    expect(recorder.runs.filter((r) => r.seq >= 30).every((r) => r.memberId !== 'm0')).toBe(true);
    await settled(streamPrefix);

    await Promise.all(members.slice(1).map((m) => m.stop()));
    await pollUntil('only the client itself is left', async () => (await connectionsNamed(name)) === 1);
  });
});

/** Per shard of an ackMany: the count acknowledged (-1 refused), or the message of its failure. */
const ackCounts = (replies: ShardAck[]) => replies.map((reply) => ('acked' in reply ? reply.acked : reply.failed.message));

describe('acknowledgements of several shards in one call', () => {
  it('each shard under its own token: a refused shard does not refuse the others', async () => {
    const streamPrefix = uniqueName('ack-many');
    const client = redis.client();
    const ids: string[][] = [[], [], []];
    for (const shard of [0, 1, 2]) {
      const stream = keys.shardStream(streamPrefix, shard);
      await client.xgroup('CREATE', stream, 'group', '0', 'MKSTREAM');
      for (let i = 0; i < 3; i++) ids[shard].push(String(await client.xadd(stream, '*', 'p', '1')));
      await client.xreadgroup('GROUP', 'group', 'm', 'COUNT', 10, 'STREAMS', stream, '>');
      await client.set(keys.shardFence(streamPrefix, shard, 'group'), '0:1:m');
    }
    // Shard 1 has a new owner since.
    await client.set(keys.shardFence(streamPrefix, 1, 'group'), '0:2:other');
    const shardClient = new ShardClient(client, keys, streamPrefix, 'group', 'm');
    const replies = await shardClient.ackMany([
      { shardIndex: 0, grantEpoch: 1, ids: ids[0] },
      { shardIndex: 1, grantEpoch: 1, ids: ids[1] },
      { shardIndex: 2, grantEpoch: 1, ids: ids[2].slice(0, 2) },
    ]);
    expect(ackCounts(replies)).toEqual([3, -1, 2]);
    const pending = async (shard: number) => ((await client.xpending(keys.shardStream(streamPrefix, shard), 'group')) as [number])[0];
    expect([await pending(0), await pending(1), await pending(2)]).toEqual([0, 3, 1]);
  });

  it('with ackWaitForReplicas, WAIT follows the one call: a Redis without replicas acknowledges, and says which shards are not replicated', async () => {
    const streamPrefix = uniqueName('ack-many-wait');
    const client = redis.client();
    const ids: string[][] = [[], []];
    for (const shard of [0, 1]) {
      const stream = keys.shardStream(streamPrefix, shard);
      await client.xgroup('CREATE', stream, 'group', '0', 'MKSTREAM');
      for (let i = 0; i < 2; i++) ids[shard].push(String(await client.xadd(stream, '*', 'p', '1')));
      await client.xreadgroup('GROUP', 'group', 'm', 'COUNT', 10, 'STREAMS', stream, '>');
      await client.set(keys.shardFence(streamPrefix, shard, 'group'), shard === 0 ? '0:1:m' : '0:2:other');
    }
    const shardClient = new ShardClient(client, keys, streamPrefix, 'group', 'm', { ackWait: { replicas: 1, timeoutMs: 20 } });
    const replies = await shardClient.ackMany([
      { shardIndex: 0, grantEpoch: 1, ids: ids[0] },
      { shardIndex: 1, grantEpoch: 1, ids: ids[1] },
    ]);
    expect(ackCounts(replies)).toEqual([2, -1]);
    const notReplicated = replies.map((reply) => ('acked' in reply ? reply.notReplicated : undefined));
    expect(notReplicated[0]?.message).toMatch(/WAIT counted 0 of 1 replica/);
    expect(notReplicated[1]).toBeUndefined();
  });
});

describe('acknowledgements of several shards that fail part-way', () => {
  /** Three shards with three entries each, pending under member m, which holds their tokens. */
  async function threePendingShards(streamPrefix: string, client: Redis) {
    const ids: string[][] = [[], [], []];
    for (const shard of [0, 1, 2]) {
      const stream = keys.shardStream(streamPrefix, shard);
      await client.xgroup('CREATE', stream, 'group', '0', 'MKSTREAM');
      for (let i = 0; i < 3; i++) ids[shard].push(String(await client.xadd(stream, '*', 'p', '1')));
      await client.xreadgroup('GROUP', 'group', 'm', 'COUNT', 10, 'STREAMS', stream, '>');
      await client.set(keys.shardFence(streamPrefix, shard, 'group'), '0:1:m');
    }
    // Shard 1's XACK fails (its key is no longer a stream) after shard 0's landed.
    await client.del(keys.shardStream(streamPrefix, 1));
    await client.set(keys.shardStream(streamPrefix, 1), 'not a stream');
    const pending = async (shard: number) => ((await client.xpending(keys.shardStream(streamPrefix, shard), 'group')) as [number])[0];
    return { ids, pending };
  }

  it('say exactly which shards were acknowledged: a shard whose XACK failed is its own result', async () => {
    const streamPrefix = uniqueName('ack-many-partial');
    const client = redis.client();
    const { ids, pending } = await threePendingShards(streamPrefix, client);
    const replies = await new ShardClient(client, keys, streamPrefix, 'group', 'm').ackMany(
      ids.map((list, shardIndex) => ({ shardIndex, grantEpoch: 1, ids: list })),
    );
    expect(ackCounts(replies)).toEqual([3, expect.stringMatching(/WRONGTYPE/), 3]);
    expect([await pending(0), await pending(2)]).toEqual([0, 0]);
  });

  it('the batcher reports the shards acknowledged beside a failed one as accepted, and only the failed one as unsent', async () => {
    const streamPrefix = uniqueName('ack-batcher-partial');
    const client = redis.client();
    const { ids } = await threePendingShards(streamPrefix, client);
    const events = new EventEmitter<PollerEvents>();
    const errors: ShardError[] = [];
    const acknowledged: number[] = [];
    events.on('error', (error) => errors.push(error));
    events.on('acknowledged', ({ shardIndex }) => acknowledged.push(shardIndex));
    // Not running: a failed send is not tried again, so the outcome of the one call is what is reported.
    const batcher = new AckBatcher(new ShardClient(client, keys, streamPrefix, 'group', 'm'), events, () => false);
    const outcomes = await Promise.all(
      ids.map((list, index) => new Promise<AckOutcome>((resolve) => batcher.queue({ index, grantEpoch: 1 } as ShardState, list, resolve))),
    );
    expect(outcomes).toEqual(['accepted', 'unsent', 'accepted']);
    expect(acknowledged.sort()).toEqual([0, 2]);
    expect(errors.map((error) => [error.shardIndex, error.message, String((error.cause as Error).message)])).toEqual([
      [1, 'shard 1: acknowledging 3 entries failed; they stay pending', expect.stringMatching(/WRONGTYPE/)],
    ]);
  });
});

describe('reads while the buffer is full', () => {
  it('a member with more shards than its buffer holds reads several entries per shard and read, not one', async () => {
    // 32 shards share maxBufferedEntries 320: 10 each. Handlers free the buffer an entry at a time;
    // a read for every freed entry would ask each shard for one entry (and check each for a gap).
    const streamPrefix = uniqueName('full-buffer');
    const shardCount = 32;
    const total = 3200;
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount });
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(Array.from({ length: total }, (_, i) => ({ key: `k${i}`, payload: { seq: i } })));
    const [reads0, checks0] = [await commandCalls('xreadgroup'), await commandCalls('xrange')];
    let handled = 0;
    const member = aMember({
      streamPrefix,
      shardCount,
      maxBufferedEntries: 320,
      runtimeMaxConcurrency: shardCount,
      handler: async () => {
        await new Promise((resolve) => setTimeout(resolve, 1));
        handled += 1;
      },
    });
    await member.start();
    await pollUntil('every entry handled', async () => handled >= total);
    // (Counted before describeGroup, whose lag pages are XRANGEs too.)
    const reads = (await commandCalls('xreadgroup')) - reads0;
    // Each read checks every shard it reads for a gap with one XRANGE (firstAfter): one per shard read.
    const shardReads = (await commandCalls('xrange')) - checks0;
    await settled(streamPrefix);
    expect(reads).toBeGreaterThan(0);
    // Each read asks a shard for at least half its share (5); the shards' last reads find fewer (about
    // 4.3 per shard and read in all). Before: 1.2, a read for every entry or two that finished.
    expect(total / shardReads).toBeGreaterThanOrEqual(3);
  });
});

describe('reads while handlers drain the buffer faster than a read comes back', () => {
  it('a member reads about half its buffer per read, not a few entries per read back to back', async () => {
    // 32 shards share maxBufferedEntries 320; 32 workers each finish an entry about every
    // millisecond, faster than a read's round trip. The loop sent its next read as soon as the last
    // came back with room for a few entries: a read (a round trip, a 32-stream XREADGROUP and its
    // gap check) for every dozen entries. It now waits for room for half the buffer (160), or 50 ms
    // at most: 60 entries a read at the very least on a loaded machine.
    const streamPrefix = uniqueName('fuller-reads');
    const shardCount = 32;
    const total = 6400;
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount });
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(Array.from({ length: total }, (_, i) => ({ key: `k${i}`, payload: { seq: i } })));
    const reads0 = await commandCalls('xreadgroup');
    let handled = 0;
    const member = aMember({
      streamPrefix,
      shardCount,
      maxBufferedEntries: 320,
      runtimeMaxConcurrency: shardCount,
      handler: async () => {
        await new Promise((resolve) => setTimeout(resolve, 1));
        handled += 1;
      },
    });
    await member.start();
    await pollUntil('every entry handled', async () => handled >= total);
    const reads = (await commandCalls('xreadgroup')) - reads0;
    await settled(streamPrefix);
    expect(total / reads).toBeGreaterThanOrEqual(60);
  });
});

describe('reads while the buffer is full: every shard gets its turn', () => {
  it('a member with fewer buffer places than shards reads the shards with entries, not the same idle shards again and again', async () => {
    // 8 shards, maxBufferedEntries 2: a read has room for two shards. The read floor chose the two
    // with the fewest entries queued, ties by index: shards 0 and 1, idle, every time. Alone on its
    // hub the member blocked reading them until blockMs ran out, and chose them again: the entries
    // of shards 5-7 were never read.
    const streamPrefix = uniqueName('few-places');
    const shardCount = 8;
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount });
    let handled = 0;
    const member = aMember({
      streamPrefix,
      shardCount,
      maxBufferedEntries: 2,
      blockMs: 300,
      handler: () => {
        handled += 1;
      },
    });
    await member.start();
    await pollUntil('every shard owned', async () => member.ownedShards().length === shardCount);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(
      [5, 6, 7].flatMap((shardIndex) => Array.from({ length: 3 }, (_, i) => ({ payload: { seq: shardIndex * 10 + i }, shardIndex }))),
    );
    await pollUntil('the entries of shards 5-7 handled', async () => handled === 9, { timeoutMs: 15_000 });
    await settled(streamPrefix);
  });
});
