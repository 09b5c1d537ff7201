import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CoordinatedMember,
  CoordinatorAdmin,
  FencedInstanceIdError,
  type HandlerAbortedError,
  KeyBuilder,
  msgpackCodec,
  type PayloadCodec,
  type StreamMessage,
  StreamProducer,
} from '@redis-stream-coordinator/core';
import type { KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// Attacks on the consumption runtime (lanes, batches, manual acks, static membership,
// read-ahead: docs/runtime.md), by someone other than its authors. Each test names the promise it breaks.
const redis = useRedisServer();
const aMember = memberFactory(redis, { retryBackoffMs: 1 });
const aProxy = proxyFactory(redis);
/** Batch members (the factory's options are for single-entry handlers), stopped after each test. */
const batchMembers: CoordinatedMember<KeyedPayload>[] = [];
afterEach(async () => {
  await Promise.all(batchMembers.splice(0).map((m) => m.stop().catch(() => undefined)));
});

function sendKeyed(streamPrefix: string, count: number, key = 'k') {
  return new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
    Array.from({ length: count }, (_, i) => ({ key, shardIndex: 0, payload: { seq: i + 1 } })),
  );
}

describe('attack: a static member instance that went silent, and its replacement', () => {
  // SPEC 9.4 (one live process per member id) and SPEC 5 (a member whose lease may be lost starts no
  // handler). The coordinator lets a new instance of a static member take over once the one holding
  // it was silent for two heartbeat intervals (includes/static.lua), but the old instance counted
  // its lease from the session timeout: silent for longer than two intervals (a partition, a long GC
  // pause) and shorter than the session timeout, it went on starting handlers for what it had
  // queued, while the new instance took the same entries over and ran them too: two processes of
  // one member instance running one shard, the same entries at the same time, out of key order.
  it('the old instance starts no handler once a new instance could have taken over', async () => {
    const streamPrefix = uniqueName('attack-static-silent');
    const proxy = await aProxy();
    const starts: { who: string; seq: number; at: number }[] = [];
    let slow = true; // 20 ms per entry until the check is made, so that the old instance has a queue
    const handler = (who: string) => async (message: { payload: { seq: number } }) => {
      starts.push({ who, seq: message.payload.seq, at: performance.now() });
      if (slow) await new Promise((resolve) => setTimeout(resolve, 20));
    };
    const options = {
      streamPrefix,
      memberInstanceId: 'pod-0',
      shardCount: 1,
      sessionTimeoutMs: 8000,
      coordinator: { heartbeatIntervalMs: 100 },
    };
    const old = aMember({ ...options, handler: handler('old') }, redis.clientAt(proxy.url));
    const halted: Error[] = [];
    old.on('error', (error) => halted.push(error));
    await old.start();
    await sendKeyed(streamPrefix, 300);
    await pollUntil('the old instance to be busy with a full queue', async () => starts.length >= 5 && old.stats().bufferedEntries > 50);

    // The old instance can no longer reach Redis (its queue and its handlers are local: they go on).
    proxy.freeze();
    const replacement = aMember({ ...options, handler: handler('new') });
    await replacement.start(); // refused until the old one was silent for two heartbeat intervals
    const tookOverAt = performance.now();
    await pollUntil('the new instance to run entries', async () => starts.filter((s) => s.who === 'new').length >= 5);

    const oldStartsAfter = starts.filter((s) => s.who === 'old' && s.at > tookOverAt).map((s) => s.seq);
    slow = false;
    proxy.thaw();
    expect(oldStartsAfter).toEqual([]);
    // Back in touch, the old instance learns it was replaced and stops for good; nothing is lost.
    await pollUntil('the old instance to stop for good', async () => halted.some((e) => e instanceof FencedInstanceIdError));
    await pollUntil('every entry handled', async () => new Set(starts.map((s) => s.seq)).size === 300);
    expect(old.ownedShards()).toEqual([]);
  });
});

/** A gate a test opens: `wait` resolves once `open()` was called. */
function aGate() {
  let open: () => void = () => undefined;
  const wait = new Promise<void>((resolve) => (open = resolve));
  return { wait, open };
}

/** A codec no member here knows: its entries cannot be decoded (dead-lettered at once). */
const unknownCodec: PayloadCodec = { name: 'unknown-here', encode: (p) => JSON.stringify(p), decode: (raw) => JSON.parse(raw) };

describe('attack: handler calls that start inside one piece of work, without the dispatcher', () => {
  // docs/runtime.md (pause: "starts no handler"; a member whose lease may be lost starts none,
  // SPEC 5). The dispatcher asks before it starts work, but a batch is several handler calls when an
  // undecodable entry (or a BatchError's dead-lettered head) splits it: the call after the dead
  // letter started at once, whatever happened meanwhile. Paused, or with a lease that may be lost (the
  // shard may be another member's already), the member started a handler anyway.
  it('a batch split by an undecodable entry: the call after its dead letter waits while the member is paused', async () => {
    const streamPrefix = uniqueName('attack-batch-split-pause');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 1 });
    const json = new StreamProducer(redis.client(), { streamPrefix });
    const odd = new StreamProducer(redis.client(), { streamPrefix, codec: unknownCodec });
    await json.sendBatch([1, 2].map((seq) => ({ shardIndex: 0, payload: { seq } })));
    await odd.send({ shardIndex: 0, payload: { seq: 3 } });
    await json.sendBatch([4, 5].map((seq) => ({ shardIndex: 0, payload: { seq } })));

    const gate = aGate();
    const calls: { seqs: number[]; paused: boolean }[] = [];
    const deadLetters: string[] = [];
    const member = new CoordinatedMember<KeyedPayload>(redis.client(), {
      streamPrefix,
      consumerGroup: 'group',
      coordinator: { heartbeatIntervalMs: 200 },
      batch: { maxSize: 10 },
      handler: async (messages: StreamMessage<KeyedPayload>[]) => {
        calls.push({ seqs: messages.map((m) => m.payload.seq), paused: member.isPaused() });
        if (calls.length === 1) await gate.wait;
      },
    });
    batchMembers.push(member);
    member.on('error', () => undefined);
    member.on('dead-letter', (event) => deadLetters.push(event.id));
    await member.start();
    await pollUntil('the first call (entries 1 and 2) to run', async () => calls.length === 1);

    member.pause();
    gate.open();
    await pollUntil('entry 3 dead-lettered', async () => deadLetters.length === 1);
    const whilePaused = calls.slice(1);
    member.resume();
    await pollUntil('entries 4 and 5 handled', async () => calls.length === 2);
    expect(whilePaused).toEqual([]);
    expect(calls).toEqual([
      { seqs: [1, 2], paused: false },
      { seqs: [4, 5], paused: false },
    ]);
  });

  // The same for one entry: an asynchronous schema (zod refine(async …)) is awaited between the
  // dispatcher's go and the handler call; paused (or the lease gone) meanwhile, the handler started.
  it('an entry whose asynchronous schema answers while the member is paused waits for resume()', async () => {
    const streamPrefix = uniqueName('attack-async-schema-pause');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 1 });
    const gate = aGate();
    let checking = false;
    let answered = false;
    const Slow = z.object({ seq: z.number() }).refine(async () => {
      checking = true;
      await gate.wait;
      answered = true;
      return true;
    });
    const starts: boolean[] = [];
    const member = aMember({ streamPrefix, schema: Slow, handler: () => void starts.push(member.isPaused()) });
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).send({ shardIndex: 0, payload: { seq: 1 } });
    await pollUntil('the schema to check entry 1', async () => checking);

    member.pause();
    gate.open();
    // Polled (a timer later): by then a handler that ignores the pause has started.
    await pollUntil('the schema to have answered', async () => answered);
    member.resume();
    await pollUntil('entry 1 handled', async () => starts.length === 1);
    expect(starts).toEqual([false]); // started after resume(), not while paused
  });
});

describe('attack: a zombie read takes entries between two reads, with lanes and with batches', () => {
  // SPEC 5 per-key order (lanes) and per-shard order (batches). A late read of another consumer
  // takes entries 2 and 3 between two of the owner's reads; the owner's next read starts at 4. The
  // gap check must queue 2 and 3 before 4 with lanes (where the dispatcher picks any free key) and
  // with batches (where a batch is the queue's head), while entry 1 still runs. Guards the gap check
  // with the dispatch modes of lanes and batches (652cbe8); it held (no product change).
  const shapes = [
    { name: 'lanes 4', options: { lanes: 4, runtimeMaxConcurrency: 4 } },
    { name: 'batch of 10', options: { batch: { maxSize: 10 } } },
  ];
  for (const shape of shapes) {
    it(`${shape.name}: the zombie's entries run before the later ones of their key, once`, async () => {
      const streamPrefix = uniqueName('attack-zombie-gap');
      const stream = new KeyBuilder().shardStream(streamPrefix, 0);
      await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 1 });
      const gate = aGate();
      const runs: string[] = [];
      const run = async (message: StreamMessage<KeyedPayload>) => {
        runs.push(`${message.key}:${message.payload.seq}`);
        if (message.payload.seq === 1) await gate.wait;
      };
      const member = new CoordinatedMember<KeyedPayload>(redis.client(), {
        streamPrefix,
        consumerGroup: 'group',
        coordinator: { heartbeatIntervalMs: 200 },
        ...(shape.options.batch
          ? {
              batch: shape.options.batch,
              handler: async (messages: StreamMessage<KeyedPayload>[]) => {
                for (const m of messages) await run(m);
              },
            }
          : { ...shape.options, handler: run }),
      } as ConstructorParameters<typeof CoordinatedMember<KeyedPayload>>[1]);
      batchMembers.push(member);
      const errors: string[] = [];
      member.on('error', (error) => errors.push(error.message));
      await member.start();
      const producer = new StreamProducer(redis.client(), { streamPrefix });
      await producer.send({ shardIndex: 0, key: 'k', payload: { seq: 1 } });
      await pollUntil('entry 1 running', async () => runs.length === 1);

      // Written and taken by a zombie in one transaction: the owner's blocked read never sees them.
      const late = redis.client().multi();
      late.xadd(stream, '*', 'p', JSON.stringify({ seq: 2 }), 'k', 'k');
      late.xadd(stream, '*', 'p', JSON.stringify({ seq: 3 }), 'k', 'j');
      late.xreadgroup('GROUP', 'group', 'zombie', 'COUNT', 10, 'STREAMS', stream, '>');
      await late.exec();
      await producer.sendBatch([
        { shardIndex: 0, key: 'k', payload: { seq: 4 } },
        { shardIndex: 0, key: 'j', payload: { seq: 5 } },
      ]);
      await pollUntil(
        'the owner to have read on (2, 3 recovered, 4, 5 queued)',
        async () => member.stats().bufferedEntries >= 4 || (shape.options.lanes !== undefined && runs.length > 1),
      );
      gate.open();
      await pollUntil('all five handled', async () => new Set(runs).size === 5);
      const of = (key: string) => runs.filter((r) => r.startsWith(`${key}:`));
      expect(of('k')).toEqual(['k:1', 'k:2', 'k:4']);
      expect(of('j')).toEqual(['j:3', 'j:5']);
      if (shape.options.batch) expect(runs).toEqual(['k:1', 'k:2', 'j:3', 'k:4', 'j:5']);
      expect(errors).toContainEqual(expect.stringMatching(/2 entries before .* were delivered elsewhere/));
      await pollUntil(
        'nothing pending',
        async () => (await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group')).shards[0].pending === 0,
      );
    });
  }
});

describe('attack: two zombies, and a sweep that takes one page of their entries', () => {
  // SPEC 5 per-shard order. The sweep of other consumers' pending entries takes at most a page
  // (batchSize) per sweep. It went consumer by consumer (in the order Redis lists them, by name), so
  // when two zombies' late reads hold more than a page, it could take the later entries of one
  // zombie, queue and run them, and leave the earlier entries of the other for the next sweep: run
  // after newer ones. The member's own reads do not catch it: its cursor moved past both.
  it('the sweep takes the oldest page across zombies: entries run in stream order', async () => {
    const streamPrefix = uniqueName('attack-two-zombies');
    const stream = new KeyBuilder().shardStream(streamPrefix, 0);
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 1 });
    const order: number[] = [];
    const member = aMember({ streamPrefix, batchSize: 5, sweepIntervalMs: 200, handler: (m) => void order.push(m.payload.seq) });
    await member.start();
    await sendKeyed(streamPrefix, 1);
    await pollUntil('entry 1 handled', async () => order.length === 1);

    // Ten entries written and taken by two zombies in one transaction (the owner's blocked read gets
    // none): 2-6 by "zz-late", 7-11 by "aa-late", whose name Redis lists first.
    const late = redis.client().multi();
    for (let seq = 2; seq <= 11; seq++) late.xadd(stream, '*', 'p', JSON.stringify({ seq }), 'k', 'k');
    late.xreadgroup('GROUP', 'group', 'zz-late', 'COUNT', 5, 'STREAMS', stream, '>');
    late.xreadgroup('GROUP', 'group', 'aa-late', 'COUNT', 5, 'STREAMS', stream, '>');
    await late.exec();
    await pollUntil('all eleven handled', async () => order.length === 11, { timeoutMs: 5000 });
    expect(order).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
  });

  // The same sweep also recovers this member's own untracked entries (a read reply it never got).
  // When the other consumers' page was full, more of theirs, older than those own entries, wait for
  // the next sweep: the own entries must wait with them, not run first.
  it('own entries of a lost read reply newer than a full page of zombie entries wait for the rest of them', async () => {
    const streamPrefix = uniqueName('attack-zombies-and-own');
    const stream = new KeyBuilder().shardStream(streamPrefix, 0);
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 1 });
    const order: number[] = [];
    const member = aMember({
      streamPrefix,
      memberId: 'owner',
      batchSize: 5,
      sweepIntervalMs: 200,
      handler: (m) => void order.push(m.payload.seq),
    });
    await member.start();
    await sendKeyed(streamPrefix, 1);
    await pollUntil('entry 1 handled', async () => order.length === 1);

    // 2-6 and 7-11 taken by two zombies; 12-16 delivered to the owner itself in a reply it never got.
    const late = redis.client().multi();
    for (let seq = 2; seq <= 16; seq++) late.xadd(stream, '*', 'p', JSON.stringify({ seq }), 'k', 'k');
    late.xreadgroup('GROUP', 'group', 'zz-late', 'COUNT', 5, 'STREAMS', stream, '>');
    late.xreadgroup('GROUP', 'group', 'aa-late', 'COUNT', 5, 'STREAMS', stream, '>');
    late.xreadgroup('GROUP', 'group', 'owner', 'COUNT', 5, 'STREAMS', stream, '>');
    await late.exec();
    await pollUntil('all sixteen handled', async () => order.length === 16, { timeoutMs: 5000 });
    expect(order).toEqual(Array.from({ length: 16 }, (_, i) => i + 1));
  });
});

describe('attack: acknowledgements that wait for replicas, when a replica is missing', () => {
  // SPEC 9.1 (a late reply: the shard is handed off only when the member is gone). With
  // ackWaitForReplicas, each ack batch is followed by WAIT, which holds its connection for up to
  // timeoutMs when too few replicas answer. It ran on the connection the heartbeats use: with a
  // replica missing, the ack batches of a few shards kept the heartbeats queued behind their WAITs
  // until the lease ran out, and a busy, healthy member dropped its shards.
  it('heartbeats do not wait behind WAIT: a busy member keeps its lease and its shards', async () => {
    const streamPrefix = uniqueName('attack-wait-starves');
    const lost: unknown[] = [];
    let acknowledged = 0;
    const member = aMember({
      streamPrefix,
      shardCount: 4,
      runtimeMaxConcurrency: 4,
      sessionTimeoutMs: 2000, // heartbeat calls time out after 666 ms, the lease after 1.6 s without one
      ackWaitForReplicas: { replicas: 1, timeoutMs: 500 }, // this Redis has no replica: every WAIT takes 500 ms
      handler: () => undefined,
    });
    member.on('lease-lost', (event) => lost.push(event));
    member.on('fenced', (event) => lost.push(event));
    member.on('acknowledged', (event) => (acknowledged += event.ids.length));
    await member.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    // Two rounds of one entry per shard, each acknowledged (four WAITs: 2 s) before the next.
    for (let round = 1; round <= 2; round++) {
      await producer.sendBatch(Array.from({ length: 4 }, (_, shardIndex) => ({ shardIndex, payload: { seq: round } })));
      await pollUntil(`round ${round} acknowledged`, async () => acknowledged >= round * 4 || lost.length > 0, { timeoutMs: 10_000 });
    }
    expect(lost).toEqual([]);
    expect(member.ownedShards()).toEqual([0, 1, 2, 3]);
  }, 60_000);
});

describe('attack: the payload bytes of a takeover whose pending entries are far apart', () => {
  // SPEC 9.1 (a call that cannot answer leaves the shard owned but unread). Entries of a binary codec
  // get their payload bytes with one XRANGE over the id range of those fetched. For a read the range
  // is the read; for a takeover or a sweep the entries can be far apart (an old entry still pending
  // beside recent ones), and the XRANGE returned everything written in between: here 3000 entries of
  // 1 kB for two entries of a few bytes. On a long stream that is a reply of gigabytes, on every try.
  it('fetches the bytes of the entries it took over, not of the stream between them', async () => {
    const streamPrefix = uniqueName('attack-sparse-bytes');
    const stream = new KeyBuilder().shardStream(streamPrefix, 0);
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 1 });
    const binary = new StreamProducer(redis.client(), { streamPrefix, codec: msgpackCodec });
    const client = redis.client();
    await client.xgroup('CREATE', stream, 'group', '0', 'MKSTREAM');
    await binary.send({ shardIndex: 0, payload: { seq: 1 } });
    const filler = client.pipeline();
    for (let i = 0; i < 3000; i++) filler.xadd(stream, '*', 'p', JSON.stringify({ seq: 0, pad: 'x'.repeat(1000) }));
    await filler.exec();
    await binary.send({ shardIndex: 0, payload: { seq: 2 } });
    // A previous owner read everything and acknowledged all but the first and the last entry.
    const read = (await client.xreadgroup('GROUP', 'group', 'previous', 'COUNT', 5000, 'STREAMS', stream, '>')) as [
      string,
      [string, string[]][],
    ][];
    const ids = read[0][1].map(([id]) => id);
    await client.xack(stream, 'group', ...ids.slice(1, -1));

    const outBefore = Number(/total_net_output_bytes:(\d+)/.exec(await client.info('stats'))![1]);
    const handled: number[] = [];
    const member = aMember({ streamPrefix, codecs: [msgpackCodec], handler: (m) => void handled.push(m.payload.seq) });
    await member.start();
    await pollUntil('both taken-over entries handled', async () => handled.length === 2);
    const sent = Number(/total_net_output_bytes:(\d+)/.exec(await client.info('stats'))![1]) - outBefore;
    expect(handled).toEqual([1, 2]);
    expect(sent).toBeLessThan(500_000); // the stream between them is 3 MB
  });
});

describe('attack: a call of another lane when a fenced write gives the shard up', () => {
  // docs/runtime.md (message.signal fires with `shard-lost` when the shard is no longer this
  // member's). A dead letter (or a takeover, a sweep) refused by a newer fencing token gives the shard
  // up at once, locally; the next owner runs its entries. The calls still running on the shard's other
  // lanes were not told: a handler honouring its signal ran on beside the next owner's run.
  it('the signals of the calls still running fire (shard-lost) when a dead letter is refused by a newer token', async () => {
    const streamPrefix = uniqueName('attack-fenced-lanes');
    const fence = new KeyBuilder().shardFence(streamPrefix, 0, 'group');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 1 });
    const reasons: string[] = [];
    const member = aMember({
      streamPrefix,
      lanes: 2,
      runtimeMaxConcurrency: 2,
      maxAttempts: 1,
      handler: async (message) => {
        if (message.key === 'b') throw new Error('b fails: dead-lettered at once');
        // Key a runs until it is told to stop.
        await new Promise<void>((resolve) => message.signal.addEventListener('abort', () => resolve(), { once: true }));
        reasons.push((message.signal.reason as HandlerAbortedError).reason);
      },
    });
    const refused: string[] = [];
    member.on('error', (error) => /dead letter of .* refused/.test(error.message) && refused.push(error.message));
    await member.start();
    await pollUntil('shard 0 claimed', async () => (await redis.client().get(fence)) !== null);
    // A newer owner's token (same incarnation, a later epoch): this member's writes are refused now.
    const [incarnation, epoch] = (await redis.client().get(fence))!.split(':');
    await redis.client().set(fence, `${incarnation}:${Number(epoch) + 5}:someone-else`);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ shardIndex: 0, key: 'a', payload: { seq: 1 } });
    await pollUntil('a running', async () => member.stats().activeHandlers === 1);
    await producer.send({ shardIndex: 0, key: 'b', payload: { seq: 2 } });
    await pollUntil('the dead letter of b refused', async () => refused.length === 1);
    await pollUntil("a's signal fired", async () => reasons.length === 1, { timeoutMs: 3000 });
    expect(reasons).toEqual(['shard-lost']);
  });
});

describe('attack: an acknowledgement refused by a newer token', () => {
  // docs/runtime.md ("gives the shard up locally, as after any fenced call"; SPEC 5: one owner runs a
  // shard). A takeover or a dead letter refused by a newer owner's token gives the shard up at once,
  // but a refused acknowledgement did not: the member went on reading the shard (reads are not
  // fenced) and running what it read, beside the new owner, every ack refused, until a heartbeat
  // told it. Read entries went to it instead of the owner, which had to take them back.
  it('gives the shard up at once: nothing more is read or run on it, its other shards go on', async () => {
    const streamPrefix = uniqueName('attack-ack-refused');
    const fence = new KeyBuilder().shardFence(streamPrefix, 0, 'group');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 2 });
    const seqs: number[] = [];
    // A heartbeat far off: only the refused ack can tell the member it lost shard 0.
    const member = aMember({
      streamPrefix,
      coordinator: { heartbeatIntervalMs: 60_000 },
      sessionTimeoutMs: 180_000,
      handler: (m) => void seqs.push(m.payload.seq),
    });
    const refusals: boolean[] = [];
    member.on('acknowledged', (event) => refusals.push(event.accepted));
    await member.start();
    await pollUntil('both shards claimed', async () => (await redis.client().get(fence)) !== null && member.ownedShards().length === 2);
    const [incarnation, epoch] = (await redis.client().get(fence))!.split(':');
    await redis.client().set(fence, `${incarnation}:${Number(epoch) + 5}:someone-else`);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ shardIndex: 0, payload: { seq: 1 } });
    await pollUntil('the ack of entry 1 refused', async () => refusals.includes(false));
    // Entry 2 on the lost shard, then entry 3 on shard 1: a member still reading shard 0 gets entry 2
    // no later than entry 3 (one read covers both shards, and 2 was written first).
    await producer.send({ shardIndex: 0, payload: { seq: 2 } });
    await producer.send({ shardIndex: 1, payload: { seq: 3 } });
    await pollUntil('entry 3 handled', async () => seqs.includes(3));
    expect(seqs).toEqual([1, 3]);
    // Not left owned but unread: the member heartbeats at once; the coordinator (which this test
    // went around) still grants shard 0, so it is claimed again, and the claim says who holds it.
    await pollUntil(
      'the claim refused, visibly',
      async () => member.stats().problems.some((p) => /shard 0: .*newer fencing token ".*someone-else"/.test(p)),
      { timeoutMs: 5000 },
    );
  });
});
