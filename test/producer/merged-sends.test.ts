import type { Redis } from 'ioredis';
import { describe, expect, it, vi } from 'vitest';
import {
  CoordinatorAdmin,
  KeyBuilder,
  PartialBatchError,
  type SendResult,
  StreamProducer,
  shardForKey,
} from '@redis-stream-coordinator/core';
import { appendToShards, MAX_ENTRIES_PER_CALL } from '../../packages/core/src/producer/entry-writer';
import { TcpProxy } from '../support/tcp-proxy';
import { proxyFactory } from '../support/proxy-fixture';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// Merged sends (docs/runtime.md "Producer"): concurrent send() calls join a per-shard micro-batch,
// at most one script call per shard per flush (on a single Redis one call for all of a flush's shards,
// test/producer/append-many.test.ts), and every promise of a single send still holds.
const redis = useRedisServer();
const keys = new KeyBuilder();
const aProxy = proxyFactory(redis);

async function aStream(shardCount: number, label = 'merged') {
  const streamPrefix = uniqueName(label);
  await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount });
  return streamPrefix;
}

/** appendEntries calls Redis ran since the last CONFIG RESETSTAT (EVALSHA, and EVAL after a NOSCRIPT). */
async function scriptCalls(client: Redis): Promise<number> {
  const info = await client.info('commandstats');
  let calls = 0;
  for (const match of info.matchAll(/cmdstat_eval(?:sha)?:calls=(\d+)/g)) calls += Number(match[1]);
  return calls;
}

interface Stored {
  key: string;
  seq: number;
  shard: number;
  id: string;
}

/** Every entry of the stream's shards, with the key and `seq` of its payload. */
async function storedEntries(streamPrefix: string, shardCount: number): Promise<Stored[]> {
  const out: Stored[] = [];
  for (let shard = 0; shard < shardCount; shard++) {
    for (const [id, fields] of await redis.client().xrange(keys.shardStream(streamPrefix, shard), '-', '+')) {
      const payload = JSON.parse(fields[fields.indexOf('p') + 1]) as { seq: number };
      out.push({ key: fields[fields.indexOf('k') + 1], seq: payload.seq, shard, id });
    }
  }
  return out;
}

const idOrder = (a: string, b: string) => {
  const [am, as] = a.split('-').map(BigInt);
  const [bm, bs] = b.split('-').map(BigInt);
  return am === bm ? Number(as - bs) : Number(am - bm);
};

/** Per key, its `seq`s in the order Redis wrote them (by entry id, across shards: one server, one clock). */
function seqsByKey(entries: Stored[]): Map<string, number[]> {
  const byKey = new Map<string, number[]>();
  for (const entry of [...entries].sort((a, b) => idOrder(a.id, b.id))) byKey.set(entry.key, [...(byKey.get(entry.key) ?? []), entry.seq]);
  return byKey;
}

const upTo = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

/** One appendEntries call on shard 0 of a one-shard stream, by a producer 'test-producer', routed with 1 shard. */
function oneCall(
  streamPrefix: string,
  entries: (string | Buffer)[][],
  groups: number[],
  writeSeq = 1,
  dues: string[] = entries.map(() => ''),
) {
  return appendToShards(redis.client(), 1, undefined, [
    {
      shardIndex: 0,
      stream: keys.shardStream(streamPrefix, 0),
      routing: keys.shardRouting(streamPrefix, 0),
      writes: keys.shardProducerWrites(streamPrefix, 0, 'test-producer'),
      writeSeq,
      entries,
      dues,
      groups,
      schedule: keys.shardSchedule(streamPrefix, 0),
      scheduledEntries: keys.shardScheduledEntries(streamPrefix, 0),
    },
  ]);
}

describe('merged sends', () => {
  it('1,024 concurrent sends over 8 shards are merged: at most one script call per shard per flush, not one per send', async () => {
    const streamPrefix = await aStream(8);
    const client = redis.client();
    const producer = new StreamProducer(client, { streamPrefix });
    await producer.send({ key: 'warm-up', payload: { seq: 0 } }); // routing read and scripts loaded
    await client.config('RESETSTAT');
    const sent = await Promise.all(Array.from({ length: 1024 }, (_, i) => producer.send({ key: `k${i % 64}`, payload: { seq: i } })));
    expect(sent).toHaveLength(1024);
    // 8 shards × 128 entries: at most one call each when the sends join before the first flush (one
    // for all of them on a single Redis); a few more when some arrive while a call is in flight.
    // Never one call per send.
    expect(await scriptCalls(client)).toBeLessThanOrEqual(32);
  });

  it("on a single Redis, one flush's calls for several shards are one script call, each shard's part answered on its own", async () => {
    const streamPrefix = await aStream(8, 'merged-many');
    const client = redis.client();
    const producer = new StreamProducer(client, { streamPrefix });
    const burst = (seq: number) =>
      Promise.all(Array.from({ length: 64 }, (_, i) => producer.send({ key: `k${i % 16}`, payload: { seq: seq + i } })));
    await producer.send({ key: 'warm-up', payload: { seq: -1 } }); // routing read, appendEntries loaded
    await burst(1_000); // appendEntriesMany loaded
    await client.config('RESETSTAT');
    const sent = await burst(0);
    // The first send goes at once alone; the other 63 go in the next flush, one call for the 7
    // idle shards and one for the first send's shard once it answered: not one per shard.
    expect(await scriptCalls(client)).toBeLessThanOrEqual(3);
    const stored = await storedEntries(streamPrefix, 8);
    for (const [i, result] of sent.entries()) {
      expect(stored.find((s) => s.id === result.id && s.shard === result.shardIndex)?.seq, `send ${i}`).toBe(i);
    }
  });

  it("a shard's part that raises Redis' error fails that shard's entries only, not written; the other parts land", async () => {
    const streamPrefix = await aStream(4, 'merged-many-part-error');
    const client = redis.client();
    const producer = new StreamProducer(client, { streamPrefix });
    await producer.send({ key: 'warm-up', payload: { seq: 0 } });
    const broken = 2;
    // The routing check's HMGET raises WRONGTYPE: the part fails as a whole.
    await client.del(keys.shardRouting(streamPrefix, broken));
    await client.set(keys.shardRouting(streamPrefix, broken), 'not a hash');
    const keyOn = (shard: number) => Array.from({ length: 1_000 }, (_, i) => `key-${i}`).find((key) => shardForKey(key, 4) === shard)!;
    const outcomes = await Promise.all(
      [0, 1, broken, 3, 0, broken].map((shard, seq) =>
        producer.send({ key: keyOn(shard), payload: { seq } }).then(
          (result) => ({ shard, written: result.shardIndex === shard }),
          (error: Error & { maybeWritten?: boolean }) => ({ shard, error: error.message }),
        ),
      ),
    );
    for (const outcome of outcomes) {
      if (outcome.shard === broken) expect(outcome).toMatchObject({ error: expect.stringMatching(/WRONGTYPE|not written/) });
      else expect(outcome).toEqual({ shard: outcome.shard, written: true });
    }
    expect((await storedEntries(streamPrefix, 4)).filter((s) => s.shard === broken)).toEqual([]);
  });

  it('per-key order holds under 1,024 concurrent sends across keys, with each send answered with its own id and shard', async () => {
    const streamPrefix = await aStream(8);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const keysUsed = 64;
    const perKey = 16;
    const sends: Promise<SendResult>[] = [];
    for (let seq = 1; seq <= perKey; seq++) {
      for (let k = 0; k < keysUsed; k++) sends.push(producer.send({ key: `key-${k}`, payload: { seq } }));
    }
    const results = await Promise.all(sends);
    const stored = await storedEntries(streamPrefix, 8);
    expect(stored).toHaveLength(keysUsed * perKey);
    // Each send's own answer: its shard is its key's, its id the entry that holds its payload.
    const byId = new Map(stored.map((s) => [`${s.shard}/${s.id}`, s]));
    results.forEach((result, i) => {
      const entry = byId.get(`${result.shardIndex}/${result.id}`);
      expect(entry).toMatchObject({ key: `key-${i % keysUsed}`, seq: Math.floor(i / keysUsed) + 1 });
      expect(result.shardIndex).toBe(shardForKey(`key-${i % keysUsed}`, 8));
    });
    for (const seqs of seqsByKey(stored).values()) expect(seqs).toEqual(upTo(perKey));
  });

  it(`a sendBatch longer than MAX_ENTRIES_PER_CALL goes in calls of at most ${MAX_ENTRIES_PER_CALL} entries, in order`, async () => {
    const streamPrefix = await aStream(1);
    const client = redis.client();
    const producer = new StreamProducer(client, { streamPrefix });
    await producer.send({ key: 'warm-up', payload: { seq: 0 } });
    await client.config('RESETSTAT');
    const batch = Array.from({ length: 3 * MAX_ENTRIES_PER_CALL + 1 }, (_, i) => ({ key: 'one-key', payload: { seq: i + 1 } }));
    const results = await producer.sendBatch(batch);
    expect(results).toHaveLength(batch.length);
    expect(await scriptCalls(client)).toBe(4);
    const stored = (await storedEntries(streamPrefix, 1)).filter((s) => s.key === 'one-key');
    expect(stored.map((s) => s.seq)).toEqual(upTo(batch.length));
    expect(stored.map((s) => s.id)).toEqual(results.map((r) => r.id));
  });

  it("a failed entry fails its own send and its key's later sends that must not overtake it, never another key's send", async () => {
    const streamPrefix = await aStream(1);
    const proxy = await aProxy();
    const producer = new StreamProducer(redis.clientAt(proxy.url), { streamPrefix });
    await producer.send({ key: 'warm-up', payload: { seq: 0 } });
    const stream = keys.shardStream(streamPrefix, 0);
    await redis.client().del(stream);
    await redis.client().set(stream, 'not a stream'); // every write to the shard fails WRONGTYPE until it is deleted

    // The first call (a:1) waits at the proxy while a:2 and b:1 are sent: they queue behind it.
    const first = proxy.holdNextRequest(TcpProxy.command('EVALSHA', '"seq":"a-1"'));
    const a1 = producer.send({ key: 'a', payload: { seq: 'a-1' } }).catch((error: Error) => error);
    await first.arrived;
    // The next call to leave (a:2 with b:1, or b:1 alone once a:2 is failed) waits too, so that the
    // shard can be repaired between the two calls.
    const next = proxy.holdNextRequest((request) => request.includes('"seq":"a-2"') || request.includes('"seq":"b-1"'));
    const a2 = producer.send({ key: 'a', payload: { seq: 'a-2' } }).catch((error: Error) => error);
    const b1 = producer.send({ key: 'b', payload: { seq: 'b-1' } }).catch((error: Error) => error);
    first.release(); // a:1 runs and fails
    await next.arrived;
    await redis.client().del(stream); // the shard takes writes again
    next.release();

    expect(await a1).toBeInstanceOf(Error);
    expect(((await a1) as Error).message).toMatch(/WRONGTYPE/);
    // a:2 must not land while a:1 did not: a retry of a:1 would come after it.
    expect(await a2).toBeInstanceOf(Error);
    expect(((await a2) as Error).message).toMatch(/earlier entry of its key failed/);
    expect(await b1).toMatchObject({ shardIndex: 0 });
    const stored = await storedEntries(streamPrefix, 1);
    expect(stored.map((s) => s.seq)).toEqual(['b-1']);
  });

  it("within one call, an entry whose write fails stops only its key's later entries; the other keys' entries are written", async () => {
    const streamPrefix = await aStream(1);
    const entry = (key: string, seq: number) => ['p', `{"seq":${seq}}`, 'k', key];
    // b's first entry is one XADD refuses (an odd number of field values): the script's own check,
    // whatever makes a write fail.
    const [outcome] = await oneCall(
      streamPrefix,
      [entry('a', 1), ['p', '{"seq":1}', 'k'], entry('a', 2), entry('b', 2), entry('c', 1)],
      [1, 2, 1, 2, 3],
    );
    expect(outcome.status).toBe('applied');
    const results = outcome.status === 'applied' ? outcome.results : [];
    expect(results.map((r) => (r instanceof Error ? r.message : r === undefined ? 'not attempted' : 'id'))).toEqual([
      'id',
      expect.stringMatching(/wrong number of arguments/i),
      'id',
      'not attempted',
      'id',
    ]);
    const stored = await storedEntries(streamPrefix, 1);
    expect(stored.map((s) => `${s.key}:${s.seq}`)).toEqual(['a:1', 'a:2', 'c:1']);
    expect(stored.map((s) => s.id)).toEqual([results[0], results[2], results[4]].map((r) => (r as { id: string }).id));
  });

  it('every entry is stored with its fields as given, whichever of them it has and in whatever order', async () => {
    const streamPrefix = await aStream(1);
    // The script is given an entry as encodeEntry writes it without its field names (payload, then
    // codec, key, headers as present); any other entry goes as it is.
    const entries: (string | Buffer)[][] = [
      ['p', '{"seq":1}'],
      ['p', '{"seq":2}', 'c', 'json'],
      ['p', '{"seq":3}', 'k', 'a'],
      ['p', '{"seq":4}', 'h', '{"x":"1"}'],
      ['p', '{"seq":5}', 'c', 'json', 'k', 'a', 'h', '{"x":"2"}'],
      ['p', Buffer.from([0, 255, 1]), 'c', 'msgpack', 'k', 'b'],
      ['k', 'a', 'p', '{"seq":7}'],
      ['p', '{"seq":8}', 'x', 'y', 'k', 'a'],
      ['p', '{"seq":9}', 'k', 'a', 'c', 'json'],
    ];
    const [outcome] = await oneCall(
      streamPrefix,
      entries,
      entries.map(() => 0),
    );
    expect(outcome.status).toBe('applied');
    const stored = await redis.client().xrangeBuffer(keys.shardStream(streamPrefix, 0), '-', '+');
    expect(stored.map(([, fields]) => fields.map((field) => field.toString('latin1')))).toEqual(
      entries.map((fields) => fields.map((field) => (typeof field === 'string' ? field : field.toString('latin1')))),
    );
  });

  it('a call accepted just before a switch writes every entry with an id below the switch, however long the call runs', async () => {
    // docs/resharding.md: an entry routed with the count before a switch has an id below it. A merged
    // call of MAX_ENTRIES_PER_CALL entries runs for a good part of a millisecond: its check may pass
    // just before switchAt and its last writes land after it.
    const client = redis.client();
    const late: string[] = [];
    let applied = 0;
    // On a loaded machine the steps between reading the time and the call can outlast a switch 1 to 3
    // ms away, and every call is then refused: each refusal moves the next switch a millisecond
    // further out, so that calls keep landing on both sides of it.
    let slack = 0;
    for (let attempt = 0; attempt < 90; attempt++) {
      const streamPrefix = await aStream(1, 'merged-straddle');
      const routing = keys.shardRouting(streamPrefix, 0);
      const [seconds, micros] = await client.time();
      const switchAt = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000) + 1 + (attempt % 3) + slack;
      // A growth 1 -> 2 switching in 1 to 3 ms: until then shard 0 takes writes routed with 1.
      await client.hset(routing, 'count', 2, 'previous', 1, 'switchAt', switchAt);
      const [outcome] = await oneCall(
        streamPrefix,
        Array.from({ length: MAX_ENTRIES_PER_CALL }, (_, i) => ['p', `{"seq":${i}}`, 'k', `k${i}`]),
        Array.from({ length: MAX_ENTRIES_PER_CALL }, (_, i) => i + 1),
      );
      if (outcome.status !== 'applied') {
        // Checked after the switch: refused, nothing written.
        slack = Math.min(slack + 1, 50);
        continue;
      }
      applied += 1;
      for (const result of outcome.results) {
        if (result !== undefined && !(result instanceof Error) && Number(result.id.split('-')[0]) >= switchAt) late.push(result.id);
      }
    }
    expect(applied).toBeGreaterThan(0);
    expect(late).toEqual([]);
  });

  it('a send the codec refuses is refused alone before it joins a call; the sends around it land', async () => {
    const streamPrefix = await aStream(2);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const outcomes = await Promise.allSettled([
      producer.send({ key: 'a', payload: { seq: 1 } }),
      producer.send({ key: 'a', payload: undefined }),
      producer.send({ key: 'a', payload: { seq: 2 } }),
      producer.send({ key: 'b', payload: { seq: 1 } }),
    ]);
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
    expect((outcomes[1] as PromiseRejectedResult).reason.message).toMatch(/cannot be encoded as JSON/);
    expect(seqsByKey(await storedEntries(streamPrefix, 2))).toEqual(
      new Map([
        ['a', [1, 2]],
        ['b', [1]],
      ]),
    );
  });

  it('a shrink mid-burst: sends refused by the removed shards are re-routed, and every key stays in order', async () => {
    const streamPrefix = await aStream(4, 'merged-shrink');
    const admin = new CoordinatorAdmin(redis.client());
    // A producer that never looks at the metadata again: it learns of the shrink from the refusals.
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 3_600_000 });
    await producer.send({ key: 'warm-up', payload: { seq: 0 } });
    const keysUsed = 32;
    const results: Promise<SendResult>[] = [];
    let seq = 0;
    let resized: Promise<unknown> | undefined;
    /** Redis time (ms) from which the shrink is in effect, once the resize returned. */
    let switchAt: number | undefined;
    const idMs = (id: string) => Number(id.split('-')[0]);
    const deadline = Date.now() + 20_000;
    // 64 sends in flight, a new one as each resolves, until 400 sends landed after the switch.
    let afterSwitch = 0;
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        while (Date.now() < deadline && afterSwitch < 400) {
          const mine = ++seq;
          const round = Math.ceil(mine / keysUsed);
          const sent = producer.send({ key: `key-${mine % keysUsed}`, payload: { seq: round } });
          results.push(sent);
          const { id } = await sent;
          if (mine === 200) {
            // The markers are written after the resize (docs/resharding.md): a switch 20 ms later came
            // before them on a loaded machine, and a stale write landed on a removed shard unrefused.
            resized = admin.resizeShards(streamPrefix, 2, { graceMs: 50, switchDelayMs: 300 }).then(async () => {
              switchAt = Number(await redis.client().hget(keys.streamMeta(streamPrefix), 'switchAt'));
            });
          }
          if (switchAt !== undefined && idMs(id) >= switchAt) afterSwitch += 1;
        }
      }),
    );
    await resized;
    expect(afterSwitch).toBeGreaterThanOrEqual(400);
    const sent = await Promise.all(results);
    const stored = (await storedEntries(streamPrefix, 4)).filter((s) => s.key !== 'warm-up');
    expect(stored).toHaveLength(sent.length);
    // No write landed on a removed shard once the shrink was in effect: the stale producer learned
    // of it from the refusals, and sent those entries again to shards 0 and 1.
    expect(stored.filter((s) => idMs(s.id) >= switchAt! && s.shard >= 2)).toEqual([]);
    expect(stored.filter((s) => idMs(s.id) < switchAt! && s.shard >= 2).length).toBeGreaterThan(0);
    for (const [key, seqs] of seqsByKey(stored)) expect({ key, seqs }).toEqual({ key, seqs: upTo(seqs.length) });
  });

  it("the write log keeps the producer's last call on the shard only, and expires: bounded however long the producer writes", async () => {
    const streamPrefix = await aStream(1);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const log = keys.shardProducerWrites(streamPrefix, 0, producer.producerId);
    const sizes: number[] = [];
    for (let call = 1; call <= 40; call++) {
      const { id } = await producer.send({ key: 'k', payload: { seq: call } }); // one call each: nothing else is in flight
      const record = (await redis.client().get(log))!;
      expect(record).toBe(`${call}\nOK\n1\n${id}`); // its sequence number, then its reply
      sizes.push(record.length);
    }
    expect(Math.max(...sizes)).toBeLessThan(64);
    expect(await redis.client().pttl(log)).toBeGreaterThan(500_000); // WRITE_LOG_TTL_MS, renewed by each call
  });

  it("a resent call is answered from the write log, and a resend of an older call than the log's writes nothing", async () => {
    const streamPrefix = await aStream(1);
    const call = (writeSeq: number, seq: number) => oneCall(streamPrefix, [['p', `{"seq":${seq}}`, 'k', 'a']], [1], writeSeq);
    const [first] = await call(1, 1);
    const [second] = await call(2, 2);
    // The last call sent again (a lost reply): the first run's answer, nothing written.
    expect(await call(2, 2)).toEqual([second]);
    // An older one (given up past its deadline, resent after a reconnect): it ran already, before the
    // later one; it is not run again, and its late answer says its entries may be in the stream.
    const [older] = await call(1, 1);
    expect(older).toMatchObject({ status: 'failed', replied: false });
    expect(older.status === 'failed' && older.error.message).toMatch(/older than the last one on its shard, not run again/);
    const stored = await storedEntries(streamPrefix, 1);
    expect(stored.map((s) => s.seq)).toEqual([1, 2]);
    expect(stored.map((s) => s.id)).toEqual(
      [first, second].map((outcome) => (outcome.status === 'applied' ? (outcome.results[0] as { id: string }).id : undefined)),
    );
  });

  it('a call of delayed and immediate entries writes each where it belongs, and its resend schedules nothing twice', async () => {
    // appendEntries-5.lua: the due times ride in one string, '' when no entry of the call is delayed
    // (every other test here), else one per entry ('-' now): each entry must keep its own.
    const streamPrefix = await aStream(1);
    const client = redis.client();
    const entries = [1, 2, 3, 4, 5].map((seq) => ['p', `{"seq":${seq}}`, 'k', seq % 2 === 0 ? 'even' : 'odd']);
    const dues = ['', '+60000', '-1', '@1', `@${Date.now() + 120_000}`];
    const [outcome] = await oneCall(streamPrefix, entries, [1, 2, 1, 2, 1], 1, dues);
    expect(outcome.status).toBe('applied');
    const results = (outcome.status === 'applied' ? outcome.results : []) as { id: string; dueAt?: number }[];
    expect(results.map((r) => (r.dueAt === undefined ? 'stream' : 'schedule'))).toEqual([
      'stream',
      'schedule',
      'stream',
      'stream',
      'schedule',
    ]);
    expect(results[1].id).toMatch(/^s\d+$/);
    expect(results[1].dueAt).toBeGreaterThan(Date.now() + 50_000);
    expect(results[4].dueAt).toBeGreaterThan(Date.now() + 110_000);
    const stored = await storedEntries(streamPrefix, 1);
    expect(stored.map((s) => s.seq)).toEqual([1, 3, 4]);
    expect(stored.map((s) => s.id)).toEqual([results[0].id, results[2].id, results[3].id]);
    const schedule = keys.shardSchedule(streamPrefix, 0);
    expect(await client.zrange(schedule, '0', '-1')).toEqual([results[1].id, results[4].id]);
    // The same call sent again (a lost reply): the first run's answer, nothing written or scheduled again.
    expect(await oneCall(streamPrefix, entries, [1, 2, 1, 2, 1], 1, dues)).toEqual([outcome]);
    expect(await storedEntries(streamPrefix, 1)).toHaveLength(3);
    expect(await client.zcard(schedule)).toBe(2);
  });

  it('after SCRIPT FLUSH a lone send still lands: the plain EVALSHA refused with NOSCRIPT goes again with the source', async () => {
    const streamPrefix = await aStream(1);
    const client = redis.client();
    const producer = new StreamProducer(client, { streamPrefix });
    await producer.send({ key: 'a', payload: { seq: 1 } });
    await client.script('FLUSH');
    expect(await producer.send({ key: 'a', payload: { seq: 2 } })).toMatchObject({ shardIndex: 0 });
    expect((await storedEntries(streamPrefix, 1)).map((s) => s.seq)).toEqual([1, 2]);
  });

  it('sends one at a time arm no timer each: one timer bounds every call in flight', async () => {
    const streamPrefix = await aStream(4, 'merged-one-timer');
    const producer = new StreamProducer(redis.client(), { streamPrefix, metadataRefreshMs: 3_600_000 });
    await producer.send({ key: 'warm-up', payload: { seq: 0 } });
    const timers = vi.spyOn(globalThis, 'setTimeout');
    let set: number;
    try {
      for (let seq = 1; seq <= 50; seq++) await producer.send({ key: `key-${seq % 7}`, payload: { seq } });
    } finally {
      set = timers.mock.calls.length;
      timers.mockRestore();
    }
    // A timer set and cleared per call cost a send at one in flight more Node CPU than the rest of
    // the producer's own work for it (docs/benchmarks.md, section 7).
    expect(set, 'timers set for 50 sends one after another').toBeLessThanOrEqual(1);
    expect((await storedEntries(streamPrefix, 4)).filter((s) => s.key !== 'warm-up')).toHaveLength(50);
  });
  it('a lone send goes at once; the sends made after it in the same tick queue behind it and keep their key order', async () => {
    const streamPrefix = await aStream(1);
    const client = redis.client();
    const producer = new StreamProducer(client, { streamPrefix });
    await producer.send({ key: 'warm-up', payload: { seq: 0 } });
    await client.config('RESETSTAT');
    // Nothing under way: the first send's call leaves before the tick ends (alone); the next two join
    // the shard's next call, after it.
    const sends = [
      producer.send({ key: 'a', payload: { seq: 1 } }),
      producer.send({ key: 'a', payload: { seq: 2 } }),
      producer.send({ key: 'b', payload: { seq: 1 } }),
    ];
    const results = await Promise.all(sends);
    expect(await scriptCalls(client)).toBe(2);
    const stored = (await storedEntries(streamPrefix, 1)).filter((s) => s.key !== 'warm-up');
    expect(stored.map((s) => `${s.key}:${s.seq}`)).toEqual(['a:1', 'a:2', 'b:1']);
    expect(stored.map((s) => s.id)).toEqual(results.map((r) => r.id));
    // Idle again once the reply came: the next lone send goes at once too, one call of its own.
    await producer.send({ key: 'a', payload: { seq: 3 } });
    expect(await scriptCalls(client)).toBe(3);
  });

  it('a merged call whose reply is lost is sent again and answered from the write log: each send resolves once, nothing is written twice', async () => {
    const streamPrefix = await aStream(1);
    const proxy = await aProxy();
    // A client as an application makes it: ioredis defaults (it resends unanswered commands after reconnecting).
    const producer = new StreamProducer(redis.clientAt(proxy.url, { maxRetriesPerRequest: 20 }), { streamPrefix });
    await producer.send({ key: 'warm-up', payload: { seq: 0 } });
    const dropped = proxy.dropNextReply(TcpProxy.command('EVALSHA'));
    const sends = ['a', 'b', 'c'].flatMap((key) => [1, 2, 3].map((seq) => producer.send({ key, payload: { seq } })));
    const results = await Promise.all(sends);
    await dropped;
    const stored = (await storedEntries(streamPrefix, 1)).filter((s) => s.key !== 'warm-up');
    expect(stored).toHaveLength(9);
    expect(new Set(results.map((r) => r.id))).toEqual(new Set(stored.map((s) => s.id)));
    for (const seqs of seqsByKey(stored).values()) expect(seqs).toEqual([1, 2, 3]);
    await pollUntil('the proxy saw a reconnect', async () => proxy.accepted >= 2);
  });
  it("a shard's call that never answers holds only its own keys across a resize switch, and fails as maybe written past its deadline", async () => {
    const streamPrefix = await aStream(4, 'merged-hung');
    const proxy = await aProxy();
    const admin = new CoordinatorAdmin(redis.client());
    // A shrink switching in two seconds: the producer learns it ahead (one metadata read) and routes
    // with 2 shards from then on, without another round trip behind the hung call.
    await admin.resizeShards(streamPrefix, 2, { graceMs: 50, switchDelayMs: 2_000 });
    const producer = new StreamProducer(redis.clientAt(proxy.url), { streamPrefix, metadataRefreshMs: 3_600_000, appendTimeoutMs: 4_000 });
    await producer.send({ key: 'warm-up', payload: { seq: 0 } });
    const keyOn = (count: number, shard: number, not?: (key: string) => boolean) =>
      Array.from({ length: 1_000 }, (_, i) => `key-${i}`).find((key) => shardForKey(key, count) === shard && !not?.(key))!;
    const hungShard = 3;
    const hungKey = keyOn(4, hungShard);
    // Another key, on another shard before the switch and after it.
    const otherShard = shardForKey(hungKey, 2) === 0 ? 1 : 0;
    const otherKey = keyOn(2, otherShard, (key) => shardForKey(key, 4) === hungShard);
    const hung = proxy.holdNextRequest(TcpProxy.command('EVALSHA', keys.shardStream(streamPrefix, hungShard)));
    const hungSend = producer.sendBatch([{ key: hungKey, payload: { seq: 1 } }]).then(
      () => undefined,
      (error: unknown) => error,
    );
    await hung.arrived;
    const switchAt = Number(await redis.client().hget(keys.streamMeta(streamPrefix), 'switchAt'));
    await pollUntil('the shrink switched', async () => Number((await redis.client().time())[0]) * 1000 >= switchAt + 10);
    // Routed with 2 shards now, while a call routed with 4 may still be refused.
    const other = proxy.holdNextRequest(TcpProxy.command('EVALSHA', keys.shardStream(streamPrefix, otherShard)));
    const hungKeyLater = producer.send({ key: hungKey, payload: { seq: 2 } }).then(
      () => undefined,
      (error: unknown) => error as Error,
    );
    const otherSend = producer.send({ key: otherKey, payload: { seq: 1 } });
    const sentToOtherShard = await Promise.race([other.arrived.then(() => true), new Promise((r) => setTimeout(() => r(false), 1_000))]);
    expect(sentToOtherShard, `a send to shard ${otherShard} was held back by shard ${hungShard}'s hung call`).toBe(true);
    // Past its deadline the hung call fails, maybe written (it may still run); its key's later send,
    // held back behind it, fails unwritten rather than overtake it.
    const failed = await hungSend;
    expect(failed).toBeInstanceOf(PartialBatchError);
    expect((failed as PartialBatchError).failed[0]).toMatchObject({ maybeWritten: true, shardIndex: hungShard });
    expect((failed as PartialBatchError).failed[0].error.message).toMatch(/no answer within 4000 ms/);
    expect((await hungKeyLater)?.message).toMatch(/an earlier entry of its key failed/);
    // Until its answer comes the hung call may still land on shard 3: the key's sends to its new shard fail meanwhile.
    await expect(producer.send({ key: hungKey, payload: { seq: 3 } })).rejects.toThrow(/may still land/);
    hung.release();
    other.release();
    expect(await otherSend).toMatchObject({ shardIndex: otherShard });
    // Answered (refused: it reached Redis after the switch), the key writes again, on its new shard.
    expect(await producer.send({ key: hungKey, payload: { seq: 4 } })).toMatchObject({ shardIndex: shardForKey(hungKey, 2) });
    const stored = (await storedEntries(streamPrefix, 4)).filter((s) => s.key !== 'warm-up');
    // Nothing of the hung call was written, nor the sends of its key that failed.
    expect(stored.map((s) => `${s.key}:${s.seq}`).sort()).toEqual([`${otherKey}:1`, `${hungKey}:4`].sort());
  });
  it('a routing read that never answers fails the sends waiting for it past appendTimeoutMs, nothing written', async () => {
    const streamPrefix = await aStream(2, 'merged-read-hung');
    const proxy = await aProxy();
    const producer = new StreamProducer(redis.clientAt(proxy.url), { streamPrefix, metadataRefreshMs: 1, appendTimeoutMs: 1_000 });
    await producer.send({ key: 'warm-up', payload: { seq: 0 } });
    const read = proxy.holdNextRequest(TcpProxy.command('HMGET', keys.streamMeta(streamPrefix)));
    await new Promise((resolve) => setTimeout(resolve, 5)); // the cached count is past metadataRefreshMs
    const sent = producer.send({ key: 'a', payload: { seq: 1 } }).then(
      () => 'written',
      (error: Error) => error.message,
    );
    await read.arrived;
    const outcome = await Promise.race([sent, new Promise((r) => setTimeout(() => r('still waiting after 5 s'), 5_000))]);
    expect(outcome).toMatch(/the routing read of stream ".*" got no answer within 1000 ms: nothing was written/);
    read.release();
    expect(await producer.send({ key: 'a', payload: { seq: 2 } })).toMatchObject({ id: expect.any(String) });
    expect((await storedEntries(streamPrefix, 2)).filter((s) => s.key === 'a').map((s) => s.seq)).toEqual([2]);
  });
});
