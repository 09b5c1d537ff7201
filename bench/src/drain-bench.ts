import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { CoordinatorAdmin, KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import { redisCpuSeconds } from './cpu';
import { memberDrain, rawDrain } from './member-bench';
import { until } from './cli';
import { elapsedMs } from './stats';

const keys = new KeyBuilder();
const SHARDS = 8;
const BATCH = 1000;

export interface DrainRepetition {
  /** entries/s written: plain pipelined XADD, and StreamProducer.sendBatch (scenario 3) */
  produceRaw: number;
  produceOurs: number;
  /** entries/s drained (scenario 1) */
  raw: number;
  ours: number;
  bullmq1: number;
  bullmq50: number;
  /** Redis CPU µs per entry, produce + consume (scenario 7) */
  cpuRaw: number;
  cpuOurs: number;
  cpuBullmq50: number;
}

function message(i: number) {
  return { key: `key-${i % 1000}`, payload: { i } };
}

/** Plain pipelined XADD of the same fields our producer writes, spread over the shards like keys would be. */
async function produceRaw(redis: Redis, streamPrefix: string, total: number): Promise<number> {
  const streams = Array.from({ length: SHARDS }, (_, i) => keys.shardStream(streamPrefix, i));
  const start = process.hrtime.bigint();
  for (let i = 0; i < total; i += BATCH) {
    const pipeline = redis.pipeline();
    for (let j = i; j < Math.min(total, i + BATCH); j++) {
      const m = message(j);
      pipeline.xadd(streams[j % SHARDS], '*', 'p', JSON.stringify(m.payload), 'c', 'json', 'k', m.key);
    }
    await pipeline.exec();
  }
  return total / (elapsedMs(start) / 1000);
}

async function produceOurs(redis: Redis, streamPrefix: string, total: number): Promise<number> {
  const producer = new StreamProducer(redis, { streamPrefix });
  const start = process.hrtime.bigint();
  for (let i = 0; i < total; i += BATCH) {
    await producer.sendBatch(Array.from({ length: Math.min(BATCH, total - i) }, (_, j) => message(i + j)));
  }
  return total / (elapsedMs(start) / 1000);
}

/** BullMQ: add `total` jobs (addBulk) and drain them with one Worker; entries/s of the drain, and the Redis CPU of both. */
async function bullmq(url: string, name: string, total: number, concurrency: number, redis: Redis): Promise<{ rate: number; cpu: number }> {
  const { port, hostname } = new URL(url);
  const connection = { host: hostname, port: Number(port), maxRetriesPerRequest: null };
  const queue = new Queue(name, { connection });
  const cpuBefore = await redisCpuSeconds(redis);
  for (let i = 0; i < total; i += BATCH) {
    await queue.addBulk(
      Array.from({ length: Math.min(BATCH, total - i) }, (_, j) => ({
        name: 'job',
        data: message(i + j),
        opts: { removeOnComplete: true },
      })),
    );
  }
  let done = 0;
  const start = process.hrtime.bigint();
  const worker = new Worker(name, async () => void (done += 1), { connection, concurrency });
  await until(() => done >= total, 600_000);
  const rate = total / (elapsedMs(start) / 1000);
  const cpu = (((await redisCpuSeconds(redis)) - cpuBefore) * 1e6) / total;
  await worker.close();
  await queue.obliterate({ force: true });
  await queue.close();
  return { rate, cpu };
}

/** One repetition of scenarios 1, 3 and 7, every system on the same Redis in turn. */
export async function drainRepetition(
  url: string,
  run: number,
  total: number,
  bullTotal: number,
  progress: (line: string) => void,
): Promise<DrainRepetition> {
  const redis = new Redis(url);
  const rawPrefix = `drain-raw-${run}`;
  const oursPrefix = `drain-ours-${run}`;
  await new CoordinatorAdmin(redis).createStream({ streamPrefix: oursPrefix, shardCount: SHARDS });

  let cpu = await redisCpuSeconds(redis);
  const produceRawRate = await produceRaw(redis, rawPrefix, total);
  const raw = await rawDrain(url, rawPrefix, SHARDS, total, 100);
  const cpuRaw = (((await redisCpuSeconds(redis)) - cpu) * 1e6) / total;

  cpu = await redisCpuSeconds(redis);
  const produceOursRate = await produceOurs(redis, oursPrefix, total);
  const ours = await memberDrain(url, oursPrefix, SHARDS, total, 100);
  const cpuOurs = (((await redisCpuSeconds(redis)) - cpu) * 1e6) / total;
  progress(`  run ${run + 1}: raw ${Math.round(raw)}/s, ours ${Math.round(ours)}/s`);

  const bull50 = await bullmq(url, `bench-c50-${run}`, bullTotal, 50, redis);
  const bull1 = await bullmq(url, `bench-c1-${run}`, bullTotal, 1, redis);
  progress(`  run ${run + 1}: BullMQ c50 ${Math.round(bull50.rate)}/s, c1 ${Math.round(bull1.rate)}/s`);
  await redis.del(
    ...Array.from({ length: SHARDS }, (_, i) => keys.shardStream(rawPrefix, i)),
    ...Array.from({ length: SHARDS }, (_, i) => keys.shardStream(oursPrefix, i)),
  );
  redis.disconnect();
  return {
    produceRaw: produceRawRate,
    produceOurs: produceOursRate,
    raw,
    ours,
    bullmq1: bull1.rate,
    bullmq50: bull50.rate,
    cpuRaw,
    cpuOurs,
    cpuBullmq50: bull50.cpu,
  };
}
