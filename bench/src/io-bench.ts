import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { CoordinatedMember, CoordinatorAdmin, StreamProducer } from '@redis-stream-coordinator/core';
import { until } from './cli';
import { elapsedMs } from './stats';

const SHARDS = 64;
const ioWork = () => new Promise<void>((resolve) => setTimeout(resolve, 1));

export interface IoCase {
  label: string;
  members: number;
  workersPerMember: number;
  /** what the issue expects: min(shards, workers) × 1,000 entries/s */
  ideal: number;
  rate: number;
  /** the same number of handler loops alone (handlerAlone), measured right after */
  alone: number;
}

export async function fill(redis: Redis, streamPrefix: string, total: number): Promise<void> {
  await new CoordinatorAdmin(redis).createStream({ streamPrefix, shardCount: SHARDS });
  const producer = new StreamProducer(redis, { streamPrefix });
  for (let i = 0; i < total; i += 1000) {
    await producer.sendBatch(Array.from({ length: Math.min(1000, total - i) }, (_, j) => ({ key: `k${i + j}`, payload: i + j })));
  }
}

/**
 * What the handler alone allows: `workers` loops awaiting the same ~1 ms timer, with no Redis and no
 * member. `setTimeout(1)` takes longer than 1 ms, and 64 timers cost the event loop too, so this is
 * the ceiling any consumer with this handler meets in this process, measured beside it.
 */
export async function handlerAlone(workers: number, seconds: number): Promise<number> {
  let done = 0;
  const start = process.hrtime.bigint();
  const until = Date.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (Date.now() < until) {
        await ioWork();
        done += 1;
      }
    }),
  );
  return done / (elapsedMs(start) / 1000);
}

/** Scenario 2: members with a handler that awaits ~1 ms, over 64 pre-filled shards. */
export async function ioCase(url: string, label: string, members: number, workersPerMember: number, seconds: number): Promise<IoCase> {
  const ideal = Math.min(SHARDS, members * workersPerMember) * 1000;
  const total = Math.max(1000, Math.round(ideal * seconds));
  const redis = new Redis(url);
  const streamPrefix = `io-${label.replace(/\W+/g, '-')}-${Date.now()}`;
  await fill(redis, streamPrefix, total);
  let handled = 0;
  const group = Array.from(
    { length: members },
    (_, i) =>
      new CoordinatedMember(redis, {
        streamPrefix,
        consumerGroup: 'bench',
        memberId: `io-${i}`,
        runtimeMaxConcurrency: workersPerMember,
        handler: async () => {
          await ioWork();
          handled += 1;
        },
      }),
  );
  const start = process.hrtime.bigint();
  await Promise.all(group.map((m) => m.start()));
  await until(() => handled >= total, 600_000);
  const rate = total / (elapsedMs(start) / 1000);
  await Promise.all(group.map((m) => m.stop()));
  redis.disconnect();
  const alone = await handlerAlone(Math.min(SHARDS, members * workersPerMember), Math.min(seconds, 2));
  return { label, members, workersPerMember, ideal, rate, alone };
}

/** BullMQ at concurrency 64 with the same handler (it keeps no per-key order). */
export async function ioBullmq(url: string, seconds: number): Promise<IoCase> {
  const ideal = 64_000;
  const total = Math.round(ideal * seconds);
  const { port, hostname } = new URL(url);
  const connection = { host: hostname, port: Number(port), maxRetriesPerRequest: null };
  const name = `io-bull-${Date.now()}`;
  const queue = new Queue(name, { connection });
  for (let i = 0; i < total; i += 1000) {
    await queue.addBulk(
      Array.from({ length: Math.min(1000, total - i) }, (_, j) => ({ name: 'job', data: i + j, opts: { removeOnComplete: true } })),
    );
  }
  let done = 0;
  const start = process.hrtime.bigint();
  const worker = new Worker(
    name,
    async () => {
      await ioWork();
      done += 1;
    },
    { connection, concurrency: 64 },
  );
  await until(() => done >= total, 600_000);
  const rate = total / (elapsedMs(start) / 1000);
  await worker.close();
  await queue.obliterate({ force: true });
  await queue.close();
  return {
    label: 'BullMQ, concurrency 64 (no per-key order)',
    members: 1,
    workersPerMember: 64,
    ideal,
    rate,
    alone: await handlerAlone(64, Math.min(seconds, 2)),
  };
}
