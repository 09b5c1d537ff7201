/**
 * Scenario 9 of docs/benchmarks.md: key-ordered lanes and batch handlers. Part of `npm run bench`;
 * `npm run bench:consumption [-- --quick]` runs only this scenario and replaces its section of
 * docs/benchmarks.md, leaving the rest as the last full run wrote it.
 */
import os from 'node:os';
import { Redis } from 'ioredis';
import { CoordinatedMember, CoordinatorAdmin, type StreamMessage, StreamProducer } from '@redis-stream-coordinator/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { runCli, until } from './cli';
import { memberDrain, rawDrain } from './member-bench';
import { redisVersion } from './redis-stats';
import { type ConsumptionFigures, consumptionSection, SECTION_9, spliceSection } from './report';
import { elapsedMs, spread } from './stats';

const LANE_SHARDS = 4;
const DRAIN_SHARDS = 8;
const ioWork = () => new Promise<void>((resolve) => setTimeout(resolve, 1));

async function fill(redis: Redis, streamPrefix: string, shards: number, total: number, keys: number): Promise<void> {
  await new CoordinatorAdmin(redis).createStream({ streamPrefix, shardCount: shards });
  const producer = new StreamProducer(redis, { streamPrefix });
  for (let i = 0; i < total; i += 1000) {
    await producer.sendBatch(
      Array.from({ length: Math.min(1000, total - i) }, (_, j) => ({ key: `key-${(i + j) % keys}`, payload: { i: i + j } })),
    );
  }
}

/** One member, 4 shards, 1,000 keys, a handler that awaits ~1 ms, `lanes` per shard (and 4 × lanes workers). */
export async function lanesCase(url: string, lanes: number, seconds: number): Promise<{ rate: number; ideal: number; inFlight: number }> {
  const ideal = LANE_SHARDS * lanes * 1000;
  const total = Math.min(40_000, Math.max(2000, Math.round(ideal * seconds)));
  const redis = new Redis(url);
  const streamPrefix = `lanes-${lanes}-${Date.now()}`;
  await fill(redis, streamPrefix, LANE_SHARDS, total, 1000);
  let handled = 0;
  let start: bigint | undefined;
  // Handlers in flight, sampled at each call's start: how full the lanes were.
  let inFlight = 0;
  let inFlightSum = 0;
  const member = new CoordinatedMember(redis, {
    streamPrefix,
    consumerGroup: 'bench',
    lanes,
    runtimeMaxConcurrency: LANE_SHARDS * lanes,
    handler: async () => {
      // Timed from the first call: the join (a few hundred ms) is the same whatever the lanes.
      start ??= process.hrtime.bigint();
      inFlightSum += ++inFlight;
      await ioWork();
      inFlight -= 1;
      handled += 1;
    },
  });
  await member.start();
  await until(() => handled >= total, 600_000);
  const rate = total / (elapsedMs(start!) / 1000);
  await member.stop();
  redis.disconnect();
  return { rate, ideal, inFlight: inFlightSum / total };
}

/** One member with `batch: { maxSize }` and a no-op handler draining 8 pre-filled shards, to its last acknowledgement. */
export async function batchDrain(url: string, streamPrefix: string, total: number, maxSize: number): Promise<number> {
  const redis = new Redis(url);
  let handled = 0;
  let start: bigint | undefined;
  const member = new CoordinatedMember(redis, {
    streamPrefix,
    consumerGroup: 'bench',
    runtimeMaxConcurrency: DRAIN_SHARDS,
    batchSize: maxSize,
    maxBufferedEntries: maxSize * DRAIN_SHARDS * 2,
    batch: { maxSize },
    handler: (messages: StreamMessage[]) => {
      // Timed from the first batch, like the raw loop from its first read: the join is not throughput.
      start ??= process.hrtime.bigint();
      handled += messages.length;
    },
  });
  const admin = new CoordinatorAdmin(redis);
  await member.start();
  await until(() => handled >= total, 300_000);
  await until(async () => (await admin.describeGroup(streamPrefix, 'bench')).shards.every((s) => s.pending === 0), 60_000);
  const seconds = elapsedMs(start!) / 1000;
  await member.stop();
  redis.disconnect();
  return total / seconds;
}

export async function measureConsumption(
  url: string,
  quick: boolean,
  repetitions: number,
  progress: (line: string) => void,
): Promise<ConsumptionFigures> {
  const seconds = quick ? 0.5 : 2;
  const lanes: ConsumptionFigures['lanes'] = [];
  for (const n of [1, 16]) {
    const runs: number[] = [];
    const inFlight: number[] = [];
    let ideal = 0;
    for (let i = 0; i < repetitions; i++) {
      const run = await lanesCase(url, n, seconds);
      runs.push(run.rate);
      inFlight.push(run.inFlight);
      ideal = run.ideal;
    }
    lanes.push({ lanes: n, ideal, rate: spread(runs), inFlight: spread(inFlight) });
    progress(`  lanes ${n}: ${Math.round(spread(runs).median)}/s (ideal ${ideal})`);
  }
  const total = quick ? 20_000 : 100_000;
  const raw: number[] = [];
  const batch: number[] = [];
  const single: number[] = [];
  const redis = new Redis(url);
  for (let i = 0; i < repetitions; i++) {
    const stamp = `${Date.now()}-${i}`;
    // Raw reads any entries: the same producer fills all three, on separate prefixes.
    for (const prefix of [`drain9-raw-${stamp}`, `drain9-batch-${stamp}`, `drain9-one-${stamp}`])
      await fill(redis, prefix, DRAIN_SHARDS, total, 1000);
    raw.push(await rawDrain(url, `drain9-raw-${stamp}`, DRAIN_SHARDS, total, 100));
    batch.push(await batchDrain(url, `drain9-batch-${stamp}`, total, 100));
    single.push(await memberDrain(url, `drain9-one-${stamp}`, DRAIN_SHARDS, total, 100));
    progress(`  run ${i + 1}: raw ${Math.round(raw[i])}/s, batch ${Math.round(batch[i])}/s, one by one ${Math.round(single[i])}/s`);
  }
  redis.disconnect();
  return {
    lanes,
    drain: { total, raw: spread(raw), batch: spread(batch), single: spread(single), batchShare: spread(batch.map((b, i) => b / raw[i])) },
  };
}

/** `npm run bench:consumption`: scenario 9 alone, spliced into docs/benchmarks.md. */
if (require.main === module) {
  runCli(async () => {
    const quick = process.argv.includes('--quick');
    const repetitions = quick ? 1 : 3;
    const server = await RedisServer.start();
    const redis = new Redis(server.url);
    try {
      const progress = (line: string) => process.stderr.write(`${line}\n`);
      progress(`scenario 9 on redis-server ${await redisVersion(redis)}, ${repetitions} repetition(s)`);
      const figures = await measureConsumption(server.url, quick, repetitions, progress);
      const machine = `${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown'}, Node ${process.version}, Redis ${await redisVersion(redis)}; ${new Date().toISOString().slice(0, 10)}, ${repetitions} repetition(s)${quick ? ' (quick)' : ''}`;
      const section = consumptionSection(figures, machine).join('\n');
      spliceSection(SECTION_9, section);
      process.stdout.write(`${section}\n`);
    } finally {
      redis.disconnect();
      await server.stop();
    }
  });
}
