/**
 * npm run bench:cost [-- --quick] [-- --runs N] [-- --only noop|io] [-- --write]
 *
 * What consuming one entry costs, in measures a loaded machine does not change much: Redis time per
 * entry (INFO commandstats, per command, and the server's own CPU from INFO cpu), the calls per
 * 1,000 entries (reads, scripts, acks), the bytes the clients sent Redis, Node CPU
 * (process.cpuUsage) and garbage collections per entry. Two cases, each beside its baseline in the
 * same run and on the same private redis-server:
 *
 * - no-op: 8 pre-filled shards, a per-entry handler that does nothing, against the raw
 *   XREADGROUP/XACK loop of scenario 1;
 * - I/O-bound: 64 pre-filled shards, one member with 64 workers and a handler that awaits ~1 ms,
 *   against the handler alone (64 loops on the same timer, no Redis).
 *
 * Wall-clock rates are printed too, with the load average: on a shared machine only their ratio in
 * one run means something, and little. Prints section 12 of docs/benchmarks.md; `--write` splices it
 * in (the rest of the file stays as the last full run wrote it).
 */
import os from 'node:os';
import { PerformanceObserver } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { CoordinatedMember, CoordinatorAdmin, KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import { loadAverage, runCli, until, withPrivateRedis } from './cli';
import { redisCpuSeconds } from './cpu';
import { handlerAlone } from './io-bench';
import { rawLoop } from './member-bench';
import { type CostFigures, type CostResults, costSection, SECTION_12, spliceSection } from './report';
import { elapsedMs, spread } from './stats';

const keys = new KeyBuilder();
const ioWork = () => new Promise<void>((resolve) => setTimeout(resolve, 1));

/** Garbage collections seen so far in this process (count, ms). */
const gc = { count: 0, ms: 0 };
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    gc.count += 1;
    gc.ms += entry.duration;
  }
}).observe({ entryTypes: ['gc'] });

interface Snapshot {
  at: bigint;
  node: NodeJS.CpuUsage;
  redisCpu: number;
  netIn: number;
  gcCount: number;
  gcMs: number;
}

export interface Cost {
  label: string;
  entries: number;
  rate: number;
  /** µs per entry */
  nodeCpu: number;
  redisCpu: number;
  /** per 1,000 entries */
  gcs: number;
  gcMs: number;
  /** bytes the clients sent Redis, per entry */
  bytesIn: number;
  /** command -> calls per 1,000 entries and usec per entry (scripts' inner commands counted under their own names too) */
  commands: Map<string, { calls: number; usec: number }>;
}

async function netInputBytes(redis: Redis): Promise<number> {
  return Number(/total_net_input_bytes:(\d+)/.exec(await redis.info('stats'))?.[1] ?? 0);
}

async function snapshot(redis: Redis): Promise<Snapshot> {
  await redis.config('RESETSTAT');
  const redisCpu = await redisCpuSeconds(redis);
  const netIn = await netInputBytes(redis);
  return { at: process.hrtime.bigint(), node: process.cpuUsage(), redisCpu, netIn, gcCount: gc.count, gcMs: gc.ms };
}

async function costSince(redis: Redis, label: string, from: Snapshot, entries: number, seconds?: number): Promise<Cost> {
  const wall = seconds ?? elapsedMs(from.at) / 1000;
  const node = process.cpuUsage(from.node);
  const info = await redis.info('commandstats');
  const redisCpu = await redisCpuSeconds(redis);
  const netIn = await netInputBytes(redis);
  const commands = new Map<string, { calls: number; usec: number }>();
  for (const line of info.split('\n')) {
    const match = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line.trim());
    if (!match || ['info', 'config', 'xinfo'].includes(match[1])) continue;
    commands.set(match[1], { calls: (Number(match[2]) * 1000) / entries, usec: Number(match[3]) / entries });
  }
  return {
    label,
    entries,
    rate: entries / wall,
    nodeCpu: (node.user + node.system) / entries,
    redisCpu: ((redisCpu - from.redisCpu) * 1e6) / entries,
    gcs: ((gc.count - from.gcCount) * 1000) / entries,
    gcMs: gc.ms - from.gcMs,
    bytesIn: (netIn - from.netIn) / entries,
    commands,
  };
}

async function fill(redis: Redis, streamPrefix: string, shards: number, total: number): Promise<void> {
  await new CoordinatorAdmin(redis).createStream({ streamPrefix, shardCount: shards });
  const producer = new StreamProducer(redis, { streamPrefix });
  for (let i = 0; i < total; i += 1000) {
    await producer.sendBatch(
      Array.from({ length: Math.min(1000, total - i) }, (_, j) => ({ key: `key-${(i + j) % 1000}`, payload: { i: i + j } })),
    );
  }
}

/** Scenario 1's raw loop (member-bench.ts): XREADGROUP COUNT 100 over every shard, a pipelined XACK per stream, in turn. */
async function raw(url: string, stats: Redis, streamPrefix: string, shards: number, total: number): Promise<Cost> {
  const redis = new Redis(url);
  const from = await rawLoop(redis, streamPrefix, shards, total, 100, () => snapshot(stats));
  const cost = await costSince(stats, 'raw XREADGROUP/XACK loop', from, total);
  redis.disconnect();
  return cost;
}

/** One member: from start() until every entry's ack landed (its 'acknowledged' events), then stop(). */
async function member(
  url: string,
  stats: Redis,
  label: string,
  streamPrefix: string,
  options: { shards: number; workers: number; io: boolean },
  total: number,
): Promise<Cost> {
  const redis = new Redis(url);
  let acked = 0;
  const m = new CoordinatedMember(redis, {
    streamPrefix,
    consumerGroup: 'bench',
    runtimeMaxConcurrency: options.workers,
    ...(options.io ? {} : { batchSize: 100, maxBufferedEntries: 100 * options.shards * 2 }),
    handler: options.io ? () => ioWork() : () => undefined,
  });
  m.on('acknowledged', (event) => {
    if (event.accepted) acked += event.ids.length;
  });
  const from = await snapshot(stats);
  await m.start();
  await until(() => acked >= total, 600_000);
  const seconds = elapsedMs(from.at) / 1000;
  const cost = await costSince(stats, label, from, total, seconds);
  await m.stop();
  redis.disconnect();
  return cost;
}

function argument(name: string): string | undefined {
  const at = process.argv.indexOf(name);
  return at < 0 ? undefined : process.argv[at + 1];
}

const f = (n: number, digits = 2) => n.toFixed(digits);

/** One run's figures of a case, command by command, for the progress lines. */
function describe(c: Cost): string[] {
  const rows = [...c.commands].filter(([, v]) => v.calls > 0.01).sort((a, b) => b[1].usec - a[1].usec);
  return [
    `  ${c.label}: ${Math.round(c.rate)}/s; Node ${f(c.nodeCpu)} µs/entry, Redis ${f(c.redisCpu)} µs/entry, ${f(c.bytesIn, 1)} B sent/entry, ${f(c.gcs)} GCs per 1k (${f(c.gcMs, 0)} ms)`,
    ...rows.map(([name, v]) => `    ${name.padEnd(16)} ${f(v.calls).padStart(8)} calls/1k  ${f(v.usec, 3).padStart(7)} µs/entry`),
  ];
}

/** A case's runs as the section's row: medians with their ranges, calls per 1,000 entries. */
function figures(runs: Cost[]): CostFigures {
  const calls = (name: string) => spread(runs.map((c) => c.commands.get(name)?.calls ?? 0));
  return {
    label: runs[0].label,
    rate: spread(runs.map((c) => c.rate)),
    nodeCpu: spread(runs.map((c) => c.nodeCpu)),
    redisCpu: spread(runs.map((c) => c.redisCpu)),
    reads: calls('xreadgroup'),
    scripts: calls('evalsha'),
    xacks: calls('xack'),
    gcs: spread(runs.map((c) => c.gcs)),
    bytesIn: spread(runs.map((c) => c.bytesIn)),
  };
}

/** Deletes the shard streams a run filled (the coordinator's few keys stay, as other scenarios leave theirs). */
async function dropShards(redis: Redis, streamPrefix: string, shards: number): Promise<void> {
  await redis.del(...Array.from({ length: shards }, (_, i) => keys.shardStream(streamPrefix, i)));
}

/**
 * Scenario 12: `repetitions` runs of each case (`only` one of them), on the redis-server at `url`.
 * `progress` gets each run's figures, command by command.
 */
export async function measureCost(
  url: string,
  quick: boolean,
  repetitions: number,
  progress: (line: string) => void,
  only?: 'noop' | 'io',
): Promise<CostResults> {
  const stats = new Redis(url);
  const noopRuns: Cost[][] = [];
  const ioRuns: Cost[] = [];
  const aloneRuns: { rate: number; nodeCpu: number }[] = [];
  const loadBefore = loadAverage();
  try {
    for (let run = 0; run < repetitions; run++) {
      const total = quick ? 20_000 : 100_000;
      const stamp = `${Date.now()}-${run}`;
      if (only !== 'io') {
        await fill(stats, `cost-raw-${stamp}`, 8, total);
        await fill(stats, `cost-ours-${stamp}`, 8, total);
        noopRuns.push([
          await raw(url, stats, `cost-raw-${stamp}`, 8, total),
          await member(url, stats, 'CoordinatedMember, no-op', `cost-ours-${stamp}`, { shards: 8, workers: 8, io: false }, total),
        ]);
        await dropShards(stats, `cost-raw-${stamp}`, 8);
        await dropShards(stats, `cost-ours-${stamp}`, 8);
      }
      if (only !== 'noop') {
        await fill(stats, `cost-io-${stamp}`, 64, total);
        ioRuns.push(
          await member(
            url,
            stats,
            'CoordinatedMember, 1 ms handler, 64 × 64',
            `cost-io-${stamp}`,
            { shards: 64, workers: 64, io: true },
            total,
          ),
        );
        await dropShards(stats, `cost-io-${stamp}`, 64);
        const from = process.cpuUsage();
        const start = process.hrtime.bigint();
        const rate = await handlerAlone(64, quick ? 0.5 : 2);
        const used = process.cpuUsage(from);
        aloneRuns.push({ rate, nodeCpu: (used.user + used.system) / ((rate * elapsedMs(start)) / 1000) });
      }
      progress(`  run ${run + 1} (load average ${loadAverage()})`);
      for (const c of [...(noopRuns[run] ?? []), ...(ioRuns[run] ? [ioRuns[run]] : [])]) for (const line of describe(c)) progress(line);
    }
  } finally {
    stats.disconnect();
  }
  return {
    noop: noopRuns.length > 0 ? [figures(noopRuns.map((r) => r[0])), figures(noopRuns.map((r) => r[1]))] : [],
    io: ioRuns.length > 0 ? figures(ioRuns) : undefined,
    alone:
      aloneRuns.length > 0 ? { rate: spread(aloneRuns.map((a) => a.rate)), nodeCpu: spread(aloneRuns.map((a) => a.nodeCpu)) } : undefined,
    load: { before: loadBefore, after: loadAverage() },
  };
}

/** `npm run bench:cost`: scenario 12 alone, printed; `--write` splices it into docs/benchmarks.md. */
if (require.main === module) {
  runCli(async () => {
    const quick = process.argv.includes('--quick');
    const repetitions = Number(argument('--runs') ?? (quick ? 1 : 3));
    const only = argument('--only');
    if (only !== undefined && only !== 'noop' && only !== 'io') throw new Error(`--only takes noop or io, not ${JSON.stringify(only)}`);
    await withPrivateRedis(async (url, version) => {
      const progress = (line: string) => process.stderr.write(`${line}\n`);
      progress(`scenario 12 on redis-server ${version}, ${repetitions} repetition(s); load average ${loadAverage()}`);
      const results = await measureCost(url, quick, repetitions, progress, only);
      const machine = `${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown'}, Node ${process.version}, Redis ${version}; ${new Date().toISOString().slice(0, 10)}, ${repetitions} repetition(s)${quick ? ' (quick)' : ''}`;
      const section = costSection(results, machine).join('\n');
      if (process.argv.includes('--write')) spliceSection(SECTION_12, section);
      process.stdout.write(`${section}\n`);
    });
  });
}
