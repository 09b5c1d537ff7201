/**
 * npm run bench [-- --quick] [-- --json]
 *
 * Starts a private redis-server (no persistence), runs the scenarios of docs/benchmarks.md with
 * progress on stderr, and writes docs/benchmarks.md and its two SVG charts. --quick: small sizes and
 * one repetition (under 2 minutes). --json: the results as JSON on stdout.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { OPTION_RANGES } from '@redis-stream-coordinator/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { type CoordinatorFigures, measureCoordinator } from './coordinator-bench';
import { measureConsumption } from './consumption-bench';
import { measureCost } from './consumer-cost-bench';
import { measureSchedules } from './schedule-bench';
import { drainRepetition, type DrainRepetition } from './drain-bench';
import { ioBullmq, ioCase } from './io-bench';
import { crashRecovery, latency, rebalance } from './member-bench';
import { memory } from './memory-bench';
import { measureHeap } from './heap-bench';
import { RESIZE_CASES, resizeUnderLoad } from './resize-bench';
import { measureProducerSend } from './producer-send-bench';
import { rollingRestart } from './restart-bench';
import { redisVersion } from './redis-stats';
import { type BenchResults, type IoFigures, report } from './report';
import { spread } from './stats';
import { lineChart } from './svg-chart';
import { runCli } from './cli';

const args = new Set(process.argv.slice(2));
const quick = args.has('--quick');
const json = args.has('--json');
const repetitions = quick ? 1 : 3;
const started = Date.now();
const progress = (line: string) => process.stderr.write(`[${Math.round((Date.now() - started) / 1000)} s] ${line}\n`);

function packageVersion(name: string): string {
  return (require(`${name}/package.json`) as { version: string }).version;
}

async function repeat<T>(times: number, run: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < times; i++) out.push(await run(i));
  return out;
}

async function main(): Promise<void> {
  const server = await RedisServer.start();
  const redis = new Redis(server.url);
  try {
    const environment = {
      date: new Date().toISOString().slice(0, 10),
      cpus: `${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown'}`,
      memoryGiB: Math.round(os.totalmem() / 2 ** 30),
      node: process.version,
      redis: await redisVersion(redis),
      ioredis: packageVersion('ioredis'),
      bullmq: packageVersion('bullmq'),
      quick,
      repetitions,
    };
    progress(`redis-server ${environment.redis} on port ${server.port}; ${quick ? 'quick' : 'full'} run, ${repetitions} repetition(s)`);

    const total = quick ? 20_000 : 200_000;
    progress(`scenarios 1, 3, 7: ${total.toLocaleString('en-US')} entries, ours against raw and BullMQ`);
    const drain: DrainRepetition[] = await repeat(repetitions, (i) =>
      drainRepetition(server.url, i, total, quick ? 5_000 : total, progress),
    );

    progress('scenario 2: I/O-bound handler over 64 shards');
    const seconds = quick ? 0.5 : 3;
    const io: IoFigures[] = [];
    for (const [label, members, workers] of [
      ['one bean member, runtimeMaxConcurrency 1', 1, 1],
      ['one bean member, runtimeMaxConcurrency 8', 1, 8],
      ['one bean member, runtimeMaxConcurrency 64', 1, 64],
      ['4 members × 16 workers', 4, 16],
    ] as const) {
      const runs = await repeat(repetitions, () => ioCase(server.url, label, members, workers, seconds));
      io.push({ label, ideal: runs[0].ideal, rate: spread(runs.map((c) => c.rate)), alone: spread(runs.map((c) => c.alone)) });
      progress(`  ${label}: ${Math.round(io[io.length - 1].rate.median)}/s`);
    }
    const bull = await repeat(repetitions, () => ioBullmq(server.url, seconds));
    io.push({ label: bull[0].label, ideal: bull[0].ideal, rate: spread(bull.map((c) => c.rate)), alone: spread(bull.map((c) => c.alone)) });

    progress('latency at 5,000 entries/s');
    const lat = await latency(server.url, 5000, quick ? 3 : 10);

    progress('scenario 4: rebalance and recovery');
    const rebalances: BenchResults['rebalance'] = [];
    const combos = quick
      ? [
          [4, 16],
          [16, 64],
          [64, 256],
        ]
      : [4, 16, 64].flatMap((members) => [64, 256, 1024].map((shards) => [members, shards]));
    for (const [members, shards] of combos) {
      const runs = await repeat(repetitions, () => rebalance(server.url, members, shards));
      rebalances.push({ members, shards, ms: spread(runs) });
      progress(`  ${members} members, ${shards} shards: ${spread(runs).median.toFixed(1)} ms`);
    }
    const recovery: BenchResults['recovery'] = [];
    for (const sessionTimeoutMs of quick ? [1000] : [1000, 3000, 6000]) {
      const runs = await repeat(repetitions, () => crashRecovery(server.url, sessionTimeoutMs));
      recovery.push({ sessionTimeoutMs, ms: spread(runs) });
      progress(`  crash recovery, session ${sessionTimeoutMs} ms: ${spread(runs).median.toFixed(0)} ms`);
    }

    progress('scenario 8: resize 8 -> 16 shards under load');
    const resize: BenchResults['resize'] = [];
    for (const c of RESIZE_CASES) {
      const runs = await repeat(repetitions, () => resizeUnderLoad(server.url, c));
      resize.push({ label: c.label, ms: spread(runs) });
      progress(`  ${c.label}: ${spread(runs).median.toFixed(0)} ms`);
    }

    progress('scenario 5: coordinator cost curve');
    const coordinator: CoordinatorFigures[] = [];
    for (const members of quick ? [10, 100, 1000] : [10, 30, 100, 300, 1000]) {
      progress(`  ${members} members, ${Math.min(members * 10, OPTION_RANGES.shardCount.max)} shards`);
      coordinator.push(
        await measureCoordinator(redis, members, {
          steadyCalls: quick ? 500 : 10_000,
          commitSamples: quick ? 3 : 7,
          progress: () => undefined,
        }),
      );
    }

    progress('scenario 6: memory');
    const mem = await memory(server.url);
    const heap = await measureHeap(server.url, quick, progress);

    progress('scenario 9: key-ordered lanes and batch handlers');
    const consumption = await measureConsumption(server.url, quick, repetitions, progress);

    progress('scenario 10: rolling restart, plain and static membership');
    const restart = [await rollingRestart(server.url, 'plain'), await rollingRestart(server.url, 'static')];

    progress('scenario 11: producer send() one entry at a time, against plain and auto-pipelined XADD');
    const producerSend = await measureProducerSend(server.url, quick, repetitions, progress);

    progress('scenario 12: what consuming one entry costs (CPU, calls, collections)');
    const cost = await measureCost(server.url, quick, repetitions, progress);

    progress('scenario 13: delayed delivery and deferred retries (deferral against a dead letter, release rate)');
    const schedule = await measureSchedules(server.url, { quick, repetitions }, progress);

    const results: BenchResults = {
      environment,
      coordinator,
      drain,
      io,
      latency: lat,
      rebalance: rebalances,
      recovery,
      resize,
      memory: mem,
      heap,
      consumption,
      restart,
      producerSend,
      cost,
      schedule,
    };
    const docs = path.resolve(__dirname, '../../docs');
    fs.writeFileSync(path.join(docs, 'benchmarks.md'), report(results));
    fs.writeFileSync(
      path.join(docs, 'benchmarks-coordinator.svg'),
      lineChart('Coordinator cost (10 shards per member)', 'members', 'Redis time', [
        { name: 'heartbeat (µs)', points: coordinator.map((f) => [f.members, f.steadyHeartbeat.redisUsPerCall]) },
        { name: 'join (µs)', points: coordinator.map((f) => [f.members, f.join.redisUsPerCall]) },
        { name: 'commit (ms × 10)', points: coordinator.map((f) => [f.members, f.commit.redisUsPerCall / 100]) },
      ]),
    );
    const byShards = [...new Set(rebalances.map((x) => x.shards))];
    fs.writeFileSync(
      path.join(docs, 'benchmarks-rebalance.svg'),
      lineChart(
        'Rebalance after a join',
        'members',
        'ms',
        byShards.map((shards) => ({
          name: `${shards} shards`,
          points: rebalances.filter((x) => x.shards === shards).map((x) => [x.members, x.ms.median] as [number, number]),
        })),
      ),
    );
    progress(`wrote docs/benchmarks.md and two charts in ${Math.round((Date.now() - started) / 1000)} s`);
    if (json) process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
  } finally {
    redis.disconnect();
    await server.stop();
  }
}

runCli(main);
