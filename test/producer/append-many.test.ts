import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, type PartialBatchError, shardForKey, StreamProducer } from '@redis-stream-coordinator/core';
import {
  appendToShards,
  MAX_ENTRIES_PER_CALL,
  type ShardAppend,
  type ShardAppendOutcome,
} from '../../packages/core/src/producer/entry-writer';
import { proxyFactory } from '../support/proxy-fixture';
import { TcpProxy } from '../support/tcp-proxy';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// appendEntriesMany-n.lua (docs/runtime.md "Producer"): on a single Redis one flush's shards go in
// one script call, each shard's part an appendEntries call of its own under pcall. Redis rolls back
// nothing a part wrote before it raised, so a part must never raise after a write, and a resend of
// the whole call (a lost reply) must be answered part by part from the write logs.
const redis = useRedisServer();
const keys = new KeyBuilder();
const aProxy = proxyFactory(redis);

async function aStream(shardCount: number) {
  const streamPrefix = uniqueName('append-many');
  await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount });
  return streamPrefix;
}

/** Shard `shard`'s part of a call by a producer 'test-producer'. */
function part(streamPrefix: string, shard: number, writeSeq: number, entries: string[][], groups: number[]): ShardAppend {
  return {
    shardIndex: shard,
    stream: keys.shardStream(streamPrefix, shard),
    routing: keys.shardRouting(streamPrefix, shard),
    writes: keys.shardProducerWrites(streamPrefix, shard, 'test-producer'),
    writeSeq,
    entries,
    dues: entries.map(() => ''),
    groups,
    schedule: keys.shardSchedule(streamPrefix, shard),
    scheduledEntries: keys.shardScheduledEntries(streamPrefix, shard),
  };
}

const entry = (key: string, seq: number) => ['p', `{"seq":${seq}}`, 'k', key];

/** Each entry's result as 'id <id>', its error, or 'not attempted'; or the call's status. */
function described(outcome: ShardAppendOutcome): string[] | string {
  if (outcome.status === 'failed') return `failed (${outcome.replied ? 'replied' : 'no reply'}): ${outcome.error.message}`;
  if (outcome.status !== 'applied') return outcome.status;
  return outcome.results.map((r) => (r instanceof Error ? r.message : r === undefined ? 'not attempted' : `id ${r.id}`));
}

async function stored(streamPrefix: string, shard: number): Promise<string[]> {
  const entries = await redis.client().xrange(keys.shardStream(streamPrefix, shard), '-', '+');
  return entries.map(([id, fields]) => `${fields[fields.indexOf('k') + 1]}:${JSON.parse(fields[fields.indexOf('p') + 1]).seq} ${id}`);
}

describe('appendEntriesMany', () => {
  it("a lost reply's resend is answered part by part from the write logs: a part that failed mid-call, one that raised and a clean one, nothing written twice", async () => {
    const streamPrefix = await aStream(3);
    // Shard 1's routing check raises WRONGTYPE: its part fails as a whole, before any write.
    await redis.client().del(keys.shardRouting(streamPrefix, 1));
    await redis.client().set(keys.shardRouting(streamPrefix, 1), 'not a hash');
    const call = () =>
      appendToShards(redis.client(), 3, undefined, [
        // Shard 0: the lean loop writes a:1, then b:1 fails (an odd number of field values), and the
        // general loop takes over: a:2 written, b:2 not attempted, c:1 written.
        part(streamPrefix, 0, 7, [entry('a', 1), ['p', '{"seq":1}', 'k'], entry('a', 2), entry('b', 2), entry('c', 1)], [1, 2, 1, 2, 3]),
        part(streamPrefix, 1, 7, [entry('d', 1)], [1]),
        part(streamPrefix, 2, 7, [entry('e', 1), entry('e', 2)], [1, 1]),
      ]);
    const first = (await call()).map(described);
    expect(first[0]).toEqual([
      expect.stringMatching(/^id /),
      expect.stringMatching(/wrong number of arguments/i),
      expect.stringMatching(/^id /),
      'not attempted',
      expect.stringMatching(/^id /),
    ]);
    expect(first[1]).toMatch(/^failed \(replied\): .*WRONGTYPE/);
    expect(first[2]).toEqual([expect.stringMatching(/^id /), expect.stringMatching(/^id /)]);
    const before = [await stored(streamPrefix, 0), await stored(streamPrefix, 2)];
    expect(before[0].map((s) => s.split(' ')[0])).toEqual(['a:1', 'a:2', 'c:1']);
    expect(before[0].map((s) => `id ${s.split(' ')[1]}`)).toEqual([first[0][0], first[0][2], first[0][4]]);
    expect(before[1].map((s) => `id ${s.split(' ')[1]}`)).toEqual(first[2]);

    // The same call again (ioredis resending it after a reconnect): the first run's answers.
    expect((await call()).map(described)).toEqual(first);
    expect([await stored(streamPrefix, 0), await stored(streamPrefix, 2)]).toEqual(before);
    expect(await stored(streamPrefix, 1)).toEqual([]);
  });

  it('a merged call answered past its deadline: each of its sends fails once, as maybe written; the late answer settles nothing again and its keys go on in order', async () => {
    const streamPrefix = await aStream(4);
    const proxy = await aProxy();
    const producer = new StreamProducer(redis.clientAt(proxy.url), { streamPrefix, metadataRefreshMs: 3_600_000, appendTimeoutMs: 1_000 });
    await producer.send({ key: 'warm-up', payload: { seq: 0 } });
    const keyOn = (shard: number) => Array.from({ length: 1_000 }, (_, i) => `key-${i}`).find((key) => shardForKey(key, 4) === shard)!;
    const [k0, k1, k2] = [keyOn(0), keyOn(1), keyOn(2)];
    // k0's send goes at once alone; k1's and k2's go together next, one appendEntriesMany call: both held.
    const held = proxy.holdNextRequest(
      (request) =>
        TcpProxy.command('EVALSHA')(request) &&
        request.includes(keys.shardStream(streamPrefix, 1)) &&
        request.includes(keys.shardStream(streamPrefix, 2)),
    );
    const settled: string[] = [];
    // Each a batch of one: its error says whether the entry may be in the stream.
    const track = (label: string, key: string) =>
      producer.sendBatch([{ key, payload: { seq: 1 } }]).then(
        () => settled.push(`${label} written`),
        (error: PartialBatchError) => settled.push(`${label} failed${error.failed[0].maybeWritten ? ', maybe written' : ''}`),
      );
    const sends = [track('k0:1', k0), track('k1:1', k1), track('k2:1', k2)];
    await held.arrived;
    await Promise.all(sends);
    // k0's lone call left in the same write as the merged one, and waits at the proxy with it.
    expect(settled.sort()).toEqual(['k0:1 failed, maybe written', 'k1:1 failed, maybe written', 'k2:1 failed, maybe written']);
    // Until its answer comes, a later entry of its keys fails rather than risk overtaking it.
    await expect(producer.send({ key: k1, payload: { seq: 2 } })).rejects.toThrow(/may still land/);
    held.release();
    // Its answer (written) comes late, before the answer of a call sent after it on the connection:
    // it settles nothing again, and the keys write on after it.
    await producer.send({ key: keyOn(3), payload: { seq: 1 } });
    expect(await producer.send({ key: k1, payload: { seq: 2 } })).toMatchObject({ shardIndex: 1 });
    expect(await producer.send({ key: k2, payload: { seq: 2 } })).toMatchObject({ shardIndex: 2 });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(settled).toHaveLength(3);
    const keyed = async (shard: number, key: string) =>
      (await stored(streamPrefix, shard)).map((s) => s.split(' ')[0]).filter((s) => s.startsWith(`${key}:`));
    expect(await keyed(1, k1)).toEqual([`${k1}:1`, `${k1}:2`]);
    expect(await keyed(2, k2)).toEqual([`${k2}:1`, `${k2}:2`]);
  });

  it("each part checks its own shard's routing: one mid-resize takes writes with the count before it, one switched is refused, one at rest ignores a stale switchAt", async () => {
    const streamPrefix = await aStream(3);
    const client = redis.client();
    const [seconds] = await client.time();
    const nowMs = Number(seconds) * 1000;
    // A growth 3 -> 6: shard 0 has not switched yet, shard 1 has; shard 2's marker is at rest (count
    // = previous) with a switchAt still ahead, which says nothing then.
    await client.hset(keys.shardRouting(streamPrefix, 0), 'count', 6, 'previous', 3, 'switchAt', nowMs + 600_000);
    await client.hset(keys.shardRouting(streamPrefix, 1), 'count', 6, 'previous', 3, 'switchAt', nowMs - 1);
    await client.hset(keys.shardRouting(streamPrefix, 2), 'count', 3, 'previous', 3, 'switchAt', nowMs + 600_000);
    const call = () =>
      appendToShards(client, 3, undefined, [
        part(streamPrefix, 0, 1, [entry('a', 1), entry('a', 2)], [1, 1]),
        part(streamPrefix, 1, 1, [entry('b', 1)], [1]),
        part(streamPrefix, 2, 1, [entry('c', 1)], [1]),
      ]);
    const outcomes = await call();
    expect(outcomes[1]).toEqual({ status: 'reroute', shardCountInEffect: 6 });
    expect(outcomes[2]).toMatchObject({ status: 'applied' });
    expect(outcomes[0]).toMatchObject({ status: 'applied' });
    // Sent again (a lost reply): each part's first answer, from its write log.
    expect(await call()).toEqual(outcomes);
    expect((await stored(streamPrefix, 0)).map((s) => s.split(' ')[0])).toEqual(['a:1', 'a:2']);
    expect(await stored(streamPrefix, 1)).toEqual([]);
    expect((await stored(streamPrefix, 2)).map((s) => s.split(' ')[0])).toEqual(['c:1']);
  });

  it('memory full: a merged call says exactly what landed, never "not written" for a written entry, and the retry keeps each key in order', async () => {
    const streamPrefix = await aStream(4);
    const client = redis.client();
    const producer = new StreamProducer(client, { streamPrefix });
    // 16 keys over 4 shards, 8 entries each of ~1 KB a batch: one appendEntriesMany call of 4 parts.
    const batch = (n: number) =>
      Array.from({ length: 128 }, (_, i) => ({
        key: `key-${i % 16}`,
        payload: { seq: n * 8 + Math.floor(i / 16) + 1 },
        headers: { pad: 'x'.repeat(1000) },
      }));
    const written: { shardIndex: number; id: string }[] = [...(await producer.sendBatch(batch(0)))]; // scripts loaded
    const used = Number(/used_memory:(\d+)/.exec(await client.info('memory'))![1]);
    await client.config('SET', 'maxmemory-policy', 'noeviction');
    await client.config('SET', 'maxmemory', String(used + 300_000));
    let partial: PartialBatchError | undefined;
    let sent = 1;
    try {
      for (; sent < 20 && !partial; sent++) {
        try {
          written.push(...(await producer.sendBatch(batch(sent))));
        } catch (error) {
          partial = error as PartialBatchError;
        }
      }
    } finally {
      await client.config('SET', 'maxmemory', '0');
    }
    expect(partial?.failed.length).toBeGreaterThan(0);
    expect(partial!.failed.every((f) => !f.maybeWritten && /OOM/.test(f.error.message))).toBe(true);
    written.push(...partial!.written);
    const inStreams: string[] = [];
    for (let shard = 0; shard < 4; shard++)
      for (const s of await stored(streamPrefix, shard)) inStreams.push(`${shard}/${s.split(' ')[1]}`);
    expect(inStreams.sort()).toEqual(written.map((w) => `${w.shardIndex}/${w.id}`).sort());
    await producer.sendBatch(partial!.retryBatch());
    const seqs = new Map<string, number[]>();
    for (let shard = 0; shard < 4; shard++) {
      for (const s of await stored(streamPrefix, shard)) {
        const [key, seq] = s.split(' ')[0].split(':');
        seqs.set(key, [...(seqs.get(key) ?? []), Number(seq)]);
      }
    }
    expect(seqs.size).toBe(16);
    for (const list of seqs.values()) expect(list).toEqual(Array.from({ length: sent * 8 }, (_, i) => i + 1));
  });

  it(`at its extreme, a call of ${MAX_ENTRIES_PER_CALL} entries of 4 fields each over two shards, each part's values unpacked at once, writes every entry`, async () => {
    const streamPrefix = await aStream(2);
    const full = (key: string, seq: number) => ['p', `{"seq":${seq}}`, 'c', 'json', 'k', key, 'h', '{}'];
    const big = Array.from({ length: MAX_ENTRIES_PER_CALL - 1 }, (_, i) => full(`k${i}`, i));
    const outcomes = await appendToShards(redis.client(), 2, undefined, [
      part(
        streamPrefix,
        0,
        1,
        big,
        big.map((_, i) => i + 1),
      ),
      part(streamPrefix, 1, 1, [full('z', 0)], [1]),
    ]);
    expect(
      outcomes.map((o) => (o.status === 'applied' ? o.results.filter((r) => r !== undefined && !(r instanceof Error)).length : o.status)),
    ).toEqual([MAX_ENTRIES_PER_CALL - 1, 1]);
    expect(await stored(streamPrefix, 0)).toHaveLength(MAX_ENTRIES_PER_CALL - 1);
  });
});
