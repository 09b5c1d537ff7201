/**
 * npm run bench:schedule [-- --quick] [-- --runs N] [-- --entries N] [-- --only defer|release]
 *
 * Scenario 13, delayed delivery and deferred retries (docs/runtime.md), two goals:
 *
 * - defer: deferring a failed entry (retryMode 'deferred': acknowledged and put in the group's
 *   deferred schedule in one fenced script) costs no more Redis time per entry than dead-lettering
 *   it (maxAttempts 1: the dead-letter write and the ack in one fenced script). Same pre-filled 8
 *   shards, same handler that throws, one member each; Redis CPU per entry (INFO cpu) and the
 *   scripts' time per entry (INFO commandstats), as the cost bench (scenario 12) measures them.
 * - release: a schedule of 1,000,000 delayed entries (`--entries`; 100,000 with --quick), due
 *   already, spread over 8 shards, is released by one member at 50,000 entries/s or more: from its
 *   start() until every schedule is empty (the no-op handler reads and acknowledges meanwhile, as it
 *   would). The schedules are filled server-side (a bench-only script writing the entries as a
 *   producer's delayed send stores them), so that filling a million takes seconds, not minutes.
 *
 * Prints the section; the figures of a loaded machine go nowhere else (docs/benchmarks.md keeps a
 * row "to be measured quietly" until a quiet run).
 */
import os from 'node:os';
import { Redis } from 'ioredis';
import { CoordinatedMember, CoordinatorAdmin, KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import { loadAverage, runCli, until, withPrivateRedis } from './cli';
import { redisCpuSeconds } from './cpu';
import { type Spread, spread } from './stats';

const keys = new KeyBuilder();
const SHARDS = 8;
export const SECTION_13 = '## 13. Delayed delivery and deferred retries';
/** The release goal (entries/s for one member releasing every shard of the set). */
export const RELEASE_GOAL = 50_000;
/** Entries the fill script writes per call: one call is one script run, Redis does nothing else meanwhile. */
const FILL_PER_CALL = 10_000;

/**
 * Writes `count` delayed entries into a shard's schedule as appendEntries-5.lua stores a keyed one
 * (fields packed with cmsgpack, the routed count beside it), all due at ARGV[3] (Redis ms).
 * Bench-only: the library never writes a schedule but through the producer.
 */
const FILL_SCRIPT = `
local schedule, entries = KEYS[1], KEYS[2]
local first, count, due, shardCount = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
for i = first, first + count - 1 do
  local id = string.format('s%016d', i)
  redis.call('HSET', entries, id, cmsgpack.pack({ 'p', '{"i":' .. i .. '}', 'c', 'json', 'k', 'key-' .. (i % 1000) }), id .. ':c', shardCount)
  redis.call('ZADD', schedule, due, id)
end
redis.call('HSET', entries, '#seq', first + count - 1)
return count
`;

interface Measure {
  entries: number;
  seconds: number;
  /** µs per entry */
  redisCpu: number;
  /** µs per entry spent in script calls (EVALSHA and EVAL) */
  scriptUsec: number;
  scriptCalls: number;
  /** entries/s from the first release on (release only) */
  releaseRate?: number;
}

async function scriptStats(redis: Redis): Promise<{ usec: number; calls: number }> {
  let usec = 0;
  let calls = 0;
  for (const line of (await redis.info('commandstats')).split('\n')) {
    const match = /^cmdstat_(evalsha|eval):calls=(\d+),usec=(\d+)/.exec(line.trim());
    if (match) {
      calls += Number(match[2]);
      usec += Number(match[3]);
    }
  }
  return { usec, calls };
}

/** Runs `body` and measures Redis around it; `entries` is what the figures are per. */
async function measured(stats: Redis, entries: number, body: () => Promise<void>): Promise<Measure> {
  await stats.config('RESETSTAT');
  const cpuBefore = await redisCpuSeconds(stats);
  const start = process.hrtime.bigint();
  await body();
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const cpu = (await redisCpuSeconds(stats)) - cpuBefore;
  const scripts = await scriptStats(stats);
  return {
    entries,
    seconds,
    redisCpu: (cpu * 1e6) / entries,
    scriptUsec: scripts.usec / entries,
    scriptCalls: (scripts.calls * 1000) / entries,
  };
}

async function fillStream(redis: Redis, streamPrefix: string, total: number): Promise<void> {
  await new CoordinatorAdmin(redis).createStream({ streamPrefix, shardCount: SHARDS });
  const producer = new StreamProducer(redis, { streamPrefix });
  for (let i = 0; i < total; i += 1000) {
    await producer.sendBatch(
      Array.from({ length: Math.min(1000, total - i) }, (_, j) => ({ key: `key-${(i + j) % 1000}`, payload: { i: i + j } })),
    );
  }
}

/** One member whose handler always throws: dead-lettered at once (maxAttempts 1) or deferred an hour (retryMode 'deferred'). */
async function failEvery(url: string, stats: Redis, mode: 'dead-letter' | 'defer', total: number): Promise<Measure> {
  const streamPrefix = `sched-${mode}-${Date.now()}`;
  await fillStream(stats, streamPrefix, total);
  const redis = new Redis(url);
  let settled = 0;
  const member = new CoordinatedMember(redis, {
    streamPrefix,
    consumerGroup: 'bench',
    runtimeMaxConcurrency: SHARDS,
    ...(mode === 'defer'
      ? { retryMode: 'deferred' as const, maxAttempts: 2, retryBackoffMs: 3_600_000, retryBackoffMaxMs: 3_600_000 }
      : { maxAttempts: 1 }),
    handler: () => {
      throw new Error('fails');
    },
  });
  member.on('error', () => undefined);
  // Deferred, an entry is settled by its deferral or, behind its key's deferral (deferredOrder
  // 'key', the default: 1,000 keys here), by being parked: counting deferrals alone waited for good.
  const settle = () => {
    settled++;
  };
  if (mode === 'defer') member.on('deferred', settle).on('parked', settle);
  else member.on('dead-letter', settle);
  const measure = await measured(stats, total, async () => {
    await member.start();
    await until(() => settled >= total, 600_000);
  });
  await member.stop();
  redis.disconnect();
  await dropStream(stats, streamPrefix);
  return measure;
}

/** Fills 8 schedules with `entries` due entries, then times one member from start() until they are empty. */
async function release(url: string, stats: Redis, entries: number, progress: (line: string) => void): Promise<Measure> {
  const streamPrefix = `sched-release-${Date.now()}`;
  await new CoordinatorAdmin(stats).createStream({ streamPrefix, shardCount: SHARDS });
  const [seconds] = await stats.time();
  const due = String(Number(seconds) * 1000 - 1000);
  const perShard = Math.ceil(entries / SHARDS);
  const fillStart = Date.now();
  for (let shard = 0; shard < SHARDS; shard++) {
    for (let first = 1; first <= perShard; first += FILL_PER_CALL) {
      const count = Math.min(FILL_PER_CALL, perShard - first + 1);
      await stats.eval(
        FILL_SCRIPT,
        2,
        keys.shardSchedule(streamPrefix, shard),
        keys.shardScheduledEntries(streamPrefix, shard),
        first,
        count,
        due,
        SHARDS,
      );
    }
  }
  progress(`    filled ${perShard * SHARDS} scheduled entries in ${((Date.now() - fillStart) / 1000).toFixed(1)} s`);
  const redis = new Redis(url);
  const member = new CoordinatedMember(redis, {
    streamPrefix,
    consumerGroup: 'bench',
    runtimeMaxConcurrency: SHARDS,
    batchSize: 100,
    handler: () => undefined,
  });
  member.on('error', () => undefined);
  const scheduled = async () => {
    const pipeline = stats.pipeline();
    for (let shard = 0; shard < SHARDS; shard++) pipeline.zcard(keys.shardSchedule(streamPrefix, shard));
    return ((await pipeline.exec()) ?? []).reduce((sum, [, n]) => sum + Number(n), 0);
  };
  const total = perShard * SHARDS;
  let firstReleaseAt = 0n;
  let releasedBeforeIt = 0;
  const measure = await measured(stats, total, async () => {
    await member.start();
    // Polled every 20 ms (a poll costs Redis 8 ZCARDs, not counted against the release by much).
    // The release rate is timed from the first poll that found entries released (the member's join
    // and claims before it are not the release's), counting only what was released after it.
    for (;;) {
      const left = await scheduled();
      if (left < total && firstReleaseAt === 0n) {
        firstReleaseAt = process.hrtime.bigint();
        releasedBeforeIt = total - left;
      }
      if (left === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  });
  const releaseSeconds = Number(process.hrtime.bigint() - firstReleaseAt) / 1e9;
  measure.releaseRate = (total - releasedBeforeIt) / releaseSeconds;
  await member.stop();
  redis.disconnect();
  await dropStream(stats, streamPrefix);
  return measure;
}

async function dropStream(redis: Redis, streamPrefix: string): Promise<void> {
  const names: string[] = [];
  for (let shard = 0; shard < SHARDS; shard++) {
    names.push(
      keys.shardStream(streamPrefix, shard),
      keys.shardSchedule(streamPrefix, shard),
      keys.shardScheduledEntries(streamPrefix, shard),
      keys.shardDeferred(streamPrefix, shard, 'bench'),
      keys.shardDeferredEntries(streamPrefix, shard, 'bench'),
      keys.shardDeadLetterStream(streamPrefix, shard, 'bench'),
    );
  }
  await redis.del(...names);
}

export interface ScheduleResults {
  deadLetter: Measure[];
  defer: Measure[];
  release: Measure[];
  releaseEntries: number;
  load: { before: string; after: string };
}

function argument(name: string): string | undefined {
  const at = process.argv.indexOf(name);
  return at < 0 ? undefined : process.argv[at + 1];
}

/** Scenario 13: `repetitions` runs of each part (`only` one of them) on the redis-server at `url`. */
export async function measureSchedules(
  url: string,
  options: { quick: boolean; repetitions: number; releaseEntries?: number; only?: 'defer' | 'release' },
  progress: (line: string) => void,
): Promise<ScheduleResults> {
  const stats = new Redis(url);
  const results: ScheduleResults = {
    deadLetter: [],
    defer: [],
    release: [],
    releaseEntries: options.releaseEntries ?? (options.quick ? 100_000 : 1_000_000),
    load: { before: loadAverage(), after: '' },
  };
  try {
    for (let run = 0; run < options.repetitions; run++) {
      if (options.only !== 'release') {
        const total = options.quick ? 20_000 : 100_000;
        results.deadLetter.push(await failEvery(url, stats, 'dead-letter', total));
        results.defer.push(await failEvery(url, stats, 'defer', total));
        progress(`  run ${run + 1}: dead letter ${line(results.deadLetter[run])}; defer ${line(results.defer[run])}`);
      }
      if (options.only !== 'defer') {
        results.release.push(await release(url, stats, results.releaseEntries, progress));
        const r = results.release[run];
        progress(
          `  run ${run + 1}: release ${Math.round(r.releaseRate ?? 0)}/s from the first release (${Math.round(r.entries / r.seconds)}/s from start()); ${line(r)} (load average ${loadAverage()})`,
        );
      }
    }
  } finally {
    stats.disconnect();
  }
  results.load.after = loadAverage();
  return results;
}

const f2 = (n: number) => n.toFixed(2);
const range = (s: Spread, digits = 2) => `${s.median.toFixed(digits)} (${s.min.toFixed(digits)}–${s.max.toFixed(digits)})`;

function line(m: Measure): string {
  return `Redis ${f2(m.redisCpu)} µs/entry, scripts ${f2(m.scriptUsec)} µs/entry, ${f2(m.scriptCalls)} script calls/1k, ${(m.seconds).toFixed(1)} s`;
}

/** Section 13 of docs/benchmarks.md, from one run's results. */
export function scheduleSection(results: ScheduleResults, machine?: string): string[] {
  const lines = [
    SECTION_13,
    '',
    'Written by `npm run bench:schedule` (and the full run): one member on 8 pre-filled shards whose',
    'handler always throws, dead-lettering every entry (`maxAttempts: 1`) against deferring it',
    "(`retryMode: 'deferred'`, a backoff of an hour; with the default `deferredOrder: 'key'` each of the 1,000 keys' first entry is deferred and the rest parked behind it), Redis CPU per entry (`INFO cpu`); and a schedule",
    `of ${results.releaseEntries.toLocaleString('en-US')} due delayed entries over 8 shards, from one member's \`start()\` until every schedule`,
    'is empty (its no-op handler reading and acknowledging meanwhile).',
    '',
  ];
  if (machine) lines.push(`Measured by \`npm run bench:schedule\` on ${machine}.`);
  lines.push(`Load average (1 / 5 / 15 min) ${results.load.before} at the start, ${results.load.after} at the end.`, '');
  lines.push('| goal | measured | verdict |', '| --- | --- | --- |');
  if (results.defer.length > 0) {
    const dead = spread(results.deadLetter.map((m) => m.redisCpu));
    const defer = spread(results.defer.map((m) => m.redisCpu));
    const ratio = defer.median / dead.median;
    lines.push(
      `| deferring an entry costs Redis no more than dead-lettering it (CPU per entry) | ${range(defer)} µs against ${range(dead)} µs: ${f2(ratio)} × | ${ratio <= 1 ? 'met' : `**missed** (${f2(ratio)} ×)`} |`,
    );
  }
  if (results.release.length > 0) {
    const rate = spread(results.release.map((m) => m.releaseRate ?? 0));
    const fromStart = spread(results.release.map((m) => m.entries / m.seconds));
    lines.push(
      `| ${results.releaseEntries.toLocaleString('en-US')} due delayed entries on ${SHARDS} shards released at ≥ ${RELEASE_GOAL.toLocaleString('en-US')}/s | ${range(rate, 0)}/s from the first release (${range(fromStart, 0)}/s from \`start()\`; Redis ${range(spread(results.release.map((m) => m.redisCpu)))} µs/entry) | ${rate.median >= RELEASE_GOAL ? 'met' : '**missed**'} |`,
    );
  }
  return lines;
}

/** `npm run bench:schedule`: scenario 13 alone, printed. */
if (require.main === module) {
  runCli(async () => {
    const quick = process.argv.includes('--quick');
    const repetitions = Number(argument('--runs') ?? (quick ? 1 : 3));
    const entries = argument('--entries');
    const only = argument('--only');
    if (only !== undefined && only !== 'defer' && only !== 'release')
      throw new Error(`--only takes defer or release, not ${JSON.stringify(only)}`);
    if (entries !== undefined && !(Number.isInteger(Number(entries)) && Number(entries) >= SHARDS)) {
      throw new Error(`--entries takes an integer of at least ${SHARDS}, not ${JSON.stringify(entries)}`);
    }
    await withPrivateRedis(async (url, version) => {
      const progress = (text: string) => process.stderr.write(`${text}\n`);
      progress(`scenario 13 on redis-server ${version}, ${repetitions} repetition(s); load average ${loadAverage()}`);
      const results = await measureSchedules(
        url,
        { quick, repetitions, releaseEntries: entries === undefined ? undefined : Number(entries), only },
        progress,
      );
      const machine = `${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown'}, Node ${process.version}, Redis ${version}; ${new Date().toISOString().slice(0, 10)}, ${repetitions} repetition(s)${quick ? ' (quick)' : ''}`;
      process.stdout.write(`${scheduleSection(results, machine).join('\n')}\n`);
    });
  });
}
