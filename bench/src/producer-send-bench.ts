/**
 * Scenario 11 of docs/benchmarks.md: `send()` one entry at a time, against `XADD` on a plain client
 * and on an auto-pipelining one, at 1, 64 and 1,024 sends in flight over 8 shards. Part of
 * `npm run bench`; `npm run bench:producer [-- --quick] [-- --write]` runs it alone and prints its
 * tables (with `--write`, also replaces its subsections of sections 3 and 7 of docs/benchmarks.md:
 * do that on a quiet machine only, the figures are ratios within one run but the CPU ones suffer
 * from a busy one).
 */
import os from 'node:os';
import { Redis } from 'ioredis';
import { CoordinatorAdmin, KeyBuilder, StreamProducer, shardForKey } from '@redis-stream-coordinator/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { runCli } from './cli';
import { redisCpuSeconds } from './cpu';
import { redisVersion } from './redis-stats';
import {
  type ProducerSendFigures,
  producerSendCpu,
  producerSendRates,
  SECTION_3,
  SECTION_7,
  SEND_SUBSECTION,
  type SendCase,
  spliceSubsection,
} from './report';
import { elapsedMs, spread } from './stats';

const SHARDS = 8;
const KEYS = 1000;
export const IN_FLIGHT = [1, 64, 1024] as const;
const CASES: SendCase[] = ['plain', 'auto', 'ours'];

interface Sample {
  rate: number;
  redisUsPerEntry: number;
  nodeUsPerEntry: number;
}

/** Runs `op(i)` for i in 0..total-1 with `inFlight` of them under way at any time. */
async function concurrently(total: number, inFlight: number, op: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(inFlight, total) }, async () => {
      while (next < total) await op(next++);
    }),
  );
}

async function measure(admin: Redis, total: number, inFlight: number, op: (i: number) => Promise<unknown>): Promise<Sample> {
  await concurrently(Math.min(total, 2000), inFlight, op); // warm-up: connections, scripts, JIT
  const cpuBefore = await redisCpuSeconds(admin);
  const nodeBefore = process.cpuUsage();
  const start = process.hrtime.bigint();
  await concurrently(total, inFlight, op);
  const wallMs = elapsedMs(start);
  const node = process.cpuUsage(nodeBefore);
  const cpuAfter = await redisCpuSeconds(admin);
  return {
    rate: total / (wallMs / 1000),
    redisUsPerEntry: ((cpuAfter - cpuBefore) * 1e6) / total,
    nodeUsPerEntry: (node.user + node.system) / total,
  };
}

/** One repetition: every case at every level, in turn, on one Redis; the streams are emptied between cases. */
async function repetition(url: string, quick: boolean, rep: number): Promise<Record<number, Record<SendCase, Sample>>> {
  const admin = new Redis(url);
  const plain = new Redis(url);
  const auto = new Redis(url, { enableAutoPipelining: true });
  const streamPrefix = `bench-send-${rep}`;
  const keys = new KeyBuilder();
  await new CoordinatorAdmin(admin).createStream({ streamPrefix, shardCount: SHARDS });
  const producer = new StreamProducer(plain, { streamPrefix });
  const keyNames = Array.from({ length: KEYS }, (_, k) => `key-${k}`);
  const rawStreams = keyNames.map((key) => `bench-raw-${rep}:${shardForKey(key, SHARDS)}`);
  const fields = (i: number) => ['p', JSON.stringify({ n: i }), 'c', 'json', 'k', keyNames[i % KEYS]];
  const ops: Record<SendCase, (i: number) => Promise<unknown>> = {
    plain: (i) => plain.xadd(rawStreams[i % KEYS], '*', ...fields(i)),
    auto: (i) => auto.xadd(rawStreams[i % KEYS], '*', ...fields(i)),
    ours: (i) => producer.send({ key: keyNames[i % KEYS], payload: { n: i } }),
  };
  const out: Record<number, Record<SendCase, Sample>> = {};
  try {
    for (const inFlight of IN_FLIGHT) {
      const total = inFlight === 1 ? (quick ? 3_000 : 20_000) : quick ? 10_000 : 100_000;
      out[inFlight] = {} as Record<SendCase, Sample>;
      for (const c of CASES) {
        out[inFlight][c] = await measure(admin, total, inFlight, ops[c]);
        const streams = [...new Set(rawStreams)].concat(Array.from({ length: SHARDS }, (_, s) => keys.shardStream(streamPrefix, s)));
        await admin.unlink(...streams);
      }
    }
  } finally {
    for (const client of [admin, plain, auto]) client.disconnect();
  }
  return out;
}

export async function measureProducerSend(
  url: string,
  quick: boolean,
  repetitions: number,
  progress: (line: string) => void,
): Promise<ProducerSendFigures> {
  const reps: Record<number, Record<SendCase, Sample>>[] = [];
  for (let rep = 0; rep < repetitions; rep++) {
    reps.push(await repetition(url, quick, rep));
    progress(`  producer send() repetition ${rep + 1}/${repetitions}`);
  }
  const of = (inFlight: number, f: (r: Record<SendCase, Sample>) => number) => spread(reps.map((r) => f(r[inFlight])));
  return {
    load: os.loadavg()[0],
    levels: IN_FLIGHT.map((inFlight) => ({
      inFlight,
      plain: of(inFlight, (r) => r.plain.rate),
      auto: of(inFlight, (r) => r.auto.rate),
      ours: of(inFlight, (r) => r.ours.rate),
      vsPlain: of(inFlight, (r) => r.ours.rate / r.plain.rate),
      vsAuto: of(inFlight, (r) => r.ours.rate / r.auto.rate),
      redisUs: {
        plain: of(inFlight, (r) => r.plain.redisUsPerEntry),
        auto: of(inFlight, (r) => r.auto.redisUsPerEntry),
        ours: of(inFlight, (r) => r.ours.redisUsPerEntry),
      },
      nodeUs: {
        plain: of(inFlight, (r) => r.plain.nodeUsPerEntry),
        auto: of(inFlight, (r) => r.auto.nodeUsPerEntry),
        ours: of(inFlight, (r) => r.ours.nodeUsPerEntry),
      },
      redisRatio: {
        plain: of(inFlight, (r) => r.ours.redisUsPerEntry / r.plain.redisUsPerEntry),
        auto: of(inFlight, (r) => r.ours.redisUsPerEntry / r.auto.redisUsPerEntry),
      },
      nodeRatio: {
        plain: of(inFlight, (r) => r.ours.nodeUsPerEntry / r.plain.nodeUsPerEntry),
        auto: of(inFlight, (r) => r.ours.nodeUsPerEntry / r.auto.nodeUsPerEntry),
      },
    })),
  };
}

/** `npm run bench:producer`: scenario 11 alone, printed; `--write` splices it into sections 3 and 7 of docs/benchmarks.md. */
if (require.main === module) {
  runCli(async () => {
    const quick = process.argv.includes('--quick');
    const repetitions = quick ? 1 : 3;
    const server = await RedisServer.start();
    const redis = new Redis(server.url);
    try {
      const progress = (line: string) => process.stderr.write(`${line}\n`);
      const loadBefore = os.loadavg()[0];
      progress(
        `scenario 11 on redis-server ${await redisVersion(redis)}, ${repetitions} repetition(s); load average ${loadBefore.toFixed(2)}`,
      );
      const figures = await measureProducerSend(server.url, quick, repetitions, progress);
      const machine = `${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown'}, Node ${process.version}, Redis ${await redisVersion(redis)}; ${new Date().toISOString().slice(0, 10)}, ${repetitions} repetition(s)${quick ? ' (quick)' : ''}, load average ${loadBefore.toFixed(2)} before and ${figures.load.toFixed(2)} after`;
      const rates = producerSendRates(figures, machine);
      const cpu = producerSendCpu(figures, machine);
      if (process.argv.includes('--write')) {
        spliceSubsection(SECTION_3, SEND_SUBSECTION, rates);
        spliceSubsection(SECTION_7, SEND_SUBSECTION, cpu);
      }
      process.stdout.write(`${rates.join('\n')}\n${cpu.join('\n')}\n`);
    } finally {
      redis.disconnect();
      await server.stop();
    }
  });
}
