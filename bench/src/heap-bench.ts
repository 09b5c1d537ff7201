/**
 * npm run bench:heap [-- --quick] [-- --write]
 *
 * Peak heap under load: 64 members in one process (one client, so one read hub and one buffer
 * budget) consuming a stream of 1,024 pre-filled shards with a handler that awaits ~1 ms, against
 * one raw blocking XREADGROUP loop over the same 1,024 shards with the same handler (64 calls at a
 * time) under the same backlog. Three runs, each on a stream of its own, each for a fixed time:
 *
 * - the raw loop: XREADGROUP BLOCK COUNT 8 over every shard (a reply holds at most 8,192 entries,
 *   about the members' default budget), its entries handled 64 at a time, one pipelined XACK;
 * - the members with the default `maxBufferedEntriesPerClient` (8,000);
 * - the members with a budget of 64,000, that is 1,000 each: what each member buffered before the
 *   budget was shared.
 *
 * The heap is sampled every 250 ms right after a forced collection (`--expose-gc`): the live heap,
 * not what garbage happens to be uncollected. Prints the "Peak heap under load" part of section 6 of
 * docs/benchmarks.md; `--write` splices it in. The load average goes with the figures: on 2 cores,
 * above 3 they are not figures.
 */
import os from 'node:os';
import { Redis } from 'ioredis';
import { CoordinatedMember, CoordinatorAdmin, KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import { loadAverage, runCli, withPrivateRedis } from './cli';
import { HEAP_SECTION, type HeapFigures, heapSection, SECTION_6, spliceSection } from './report';

const keys = new KeyBuilder();
const SHARDS = 1024;
const MEMBERS = 64;
/** What each handler call awaits: slower than reading, so buffers fill as they would under a backlog. */
const HANDLER_MS = 1;
/** Handler calls at once: the raw loop's pool, and the members' (64 × runtimeMaxConcurrency 1). */
const CALLS_AT_ONCE = 64;
/** The raw loop's COUNT per shard: one reply holds at most SHARDS × RAW_COUNT entries. */
const RAW_COUNT = 8;
const SAMPLE_MS = 250;
/** A payload of about 200 bytes, as an application's event might be. */
const PAYLOAD = { user: 'user-000000', kind: 'order-created', note: 'x'.repeat(150) };

const gc = () => (globalThis as { gc?: () => void }).gc?.();
const work = () => new Promise<void>((resolve) => setTimeout(resolve, HANDLER_MS));

/** The live heap (after a forced collection), MiB. */
function liveHeapMiB(): number {
  gc();
  return process.memoryUsage().heapUsed / 2 ** 20;
}

/** Samples the live heap every SAMPLE_MS while `run` runs; returns its peak. */
async function peakWhile(run: () => Promise<void>): Promise<number> {
  let peak = liveHeapMiB();
  const timer = setInterval(() => {
    peak = Math.max(peak, liveHeapMiB());
  }, SAMPLE_MS);
  try {
    await run();
  } finally {
    clearInterval(timer);
  }
  return Math.max(peak, liveHeapMiB());
}

async function fill(redis: Redis, streamPrefix: string, perShard: number): Promise<void> {
  await new CoordinatorAdmin(redis).createStream({ streamPrefix, shardCount: SHARDS });
  const producer = new StreamProducer(redis, { streamPrefix });
  for (let round = 0; round < perShard; round++) {
    await producer.sendBatch(Array.from({ length: SHARDS }, (_, shardIndex) => ({ shardIndex, payload: PAYLOAD })));
  }
}

async function drop(redis: Redis, streamPrefix: string): Promise<void> {
  for (let shard = 0; shard < SHARDS; shard += 256) {
    await redis.del(...Array.from({ length: Math.min(256, SHARDS - shard) }, (_, i) => keys.shardStream(streamPrefix, shard + i)));
  }
}

/** Runs `handle` over `items`, CALLS_AT_ONCE at a time. */
async function pool<T>(items: T[], handle: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(CALLS_AT_ONCE, items.length) }, async () => {
      while (next < items.length) await handle(items[next++]);
    }),
  );
}

/** The raw loop for `seconds`: returns entries handled and the largest reply. */
async function rawLoop(url: string, streamPrefix: string, seconds: number): Promise<{ handled: number; largestReply: number }> {
  const redis = new Redis(url);
  const streams = Array.from({ length: SHARDS }, (_, i) => keys.shardStream(streamPrefix, i));
  for (const stream of streams) await redis.xgroup('CREATE', stream, 'raw', '0', 'MKSTREAM').catch(() => undefined);
  const until = Date.now() + seconds * 1000;
  let handled = 0;
  let largestReply = 0;
  try {
    while (Date.now() < until) {
      const reply = (await redis.xreadgroup(
        'GROUP',
        'raw',
        'raw-consumer',
        'COUNT',
        RAW_COUNT,
        'BLOCK',
        1000,
        'STREAMS',
        ...streams,
        ...streams.map(() => '>'),
      )) as [string, [string, string[]][]][] | null;
      if (!reply) continue;
      const entries = reply.flatMap(([stream, list]) => list.map(([id, fields]) => ({ stream, id, fields })));
      largestReply = Math.max(largestReply, entries.length);
      await pool(entries, work);
      const pipeline = redis.pipeline();
      for (const [stream, list] of reply) if (list.length > 0) pipeline.xack(stream, 'raw', ...list.map(([id]) => id));
      await pipeline.exec();
      handled += entries.length;
    }
  } finally {
    redis.disconnect();
  }
  return { handled, largestReply };
}

/** 64 members on one client for `seconds` after they all started: entries handled and the budget's peak. */
async function members(
  url: string,
  streamPrefix: string,
  seconds: number,
  maxBufferedEntriesPerClient: number,
): Promise<{ handled: number; peakEntries: number }> {
  const redis = new Redis(url);
  let handled = 0;
  const started = Array.from(
    { length: MEMBERS },
    (_, i) =>
      new CoordinatedMember(redis, {
        streamPrefix,
        consumerGroup: 'bench',
        memberId: `heap-${i}`,
        maxBufferedEntriesPerClient,
        handler: async () => {
          await work();
          handled += 1;
        },
      }),
  );
  for (const member of started) member.on('error', () => undefined);
  try {
    await Promise.all(started.map((m) => m.start()));
    await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
    return { handled, peakEntries: started[0].stats().clientBuffer.peakEntries };
  } finally {
    await Promise.all(started.map((m) => m.stop()));
    redis.disconnect();
  }
}

export async function measureHeap(url: string, quick: boolean, progress: (line: string) => void): Promise<HeapFigures> {
  const redis = new Redis(url);
  const perShard = quick ? 40 : 100;
  const seconds = quick ? 5 : 15;
  const loadBefore = loadAverage();
  try {
    const run = async <R>(label: string, body: (streamPrefix: string) => Promise<R>) => {
      const streamPrefix = `heap-${label}-${Date.now()}`;
      await fill(redis, streamPrefix, perShard);
      const base = liveHeapMiB();
      let result: R | undefined;
      const peak = await peakWhile(async () => {
        result = await body(streamPrefix);
      });
      await drop(redis, streamPrefix);
      progress(`  ${label}: peak live heap ${peak.toFixed(1)} MiB (from ${base.toFixed(1)}), load ${loadAverage()}`);
      return { peakMiB: peak, baseMiB: base, result: result as R };
    };
    const raw = await run('raw', (prefix) => rawLoop(url, prefix, seconds));
    const shared = await run('budget', (prefix) => members(url, prefix, seconds, 8000));
    const each = await run('each', (prefix) => members(url, prefix, seconds, MEMBERS * 1000));
    return {
      backlog: perShard * SHARDS,
      seconds,
      raw: { peakMiB: raw.peakMiB, baseMiB: raw.baseMiB, handled: raw.result.handled, buffered: raw.result.largestReply },
      shared: { peakMiB: shared.peakMiB, baseMiB: shared.baseMiB, handled: shared.result.handled, buffered: shared.result.peakEntries },
      each: { peakMiB: each.peakMiB, baseMiB: each.baseMiB, handled: each.result.handled, buffered: each.result.peakEntries },
      load: { before: loadBefore, after: loadAverage() },
    };
  } finally {
    redis.disconnect();
  }
}

/** `npm run bench:heap`: the peak-heap part of scenario 6, printed; `--write` splices it into docs/benchmarks.md. */
if (require.main === module) {
  runCli(async () => {
    if (!(globalThis as { gc?: unknown }).gc) throw new Error('run with node --expose-gc (npm run bench:heap does)');
    const quick = process.argv.includes('--quick');
    await withPrivateRedis(async (url, version) => {
      const progress = (line: string) => process.stderr.write(`${line}\n`);
      progress(`peak heap, ${MEMBERS} members / ${SHARDS} shards, on redis-server ${version}; load average ${loadAverage()}`);
      const figures = await measureHeap(url, quick, progress);
      const machine = `${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB; Node ${process.version}, Redis ${version}, ioredis ${(require('ioredis/package.json') as { version: string }).version}; ${new Date().toISOString().slice(0, 10)}${quick ? ' (quick)' : ''}`;
      const section = heapSection(figures, machine).join('\n');
      if (process.argv.includes('--write')) spliceSection(HEAP_SECTION, section, { within: SECTION_6 });
      process.stdout.write(`${section}\n`);
    });
  });
}
