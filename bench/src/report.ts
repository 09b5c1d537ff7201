import fs from 'node:fs';
import path from 'node:path';
import type { CoordinatorFigures } from './coordinator-bench';
import type { DrainRepetition } from './drain-bench';
import type { MemoryFigures } from './memory-bench';
import { type ScheduleResults, scheduleSection } from './schedule-bench';
import { type Spread, spread } from './stats';

export type RestartMode = 'static' | 'plain';

export interface RestartFigures {
  mode: RestartMode;
  /** Shard assignments to a member id other than the shard's owner before the restarts. */
  shardMoves: number;
  /** Shards that some member was asked to revoke. */
  revocations: number;
  /** Targets the assignor computed during the restarts. */
  targetCommits: number;
  /** Entries a handler ran more than once. */
  duplicates: number;
  /** From the first stop() to the group STABLE with every shard owned after the last restart. */
  ms: number;
}

export interface Environment {
  date: string;
  cpus: string;
  memoryGiB: number;
  node: string;
  redis: string;
  ioredis: string;
  bullmq: string;
  quick: boolean;
  repetitions: number;
}

export interface IoFigures {
  label: string;
  ideal: number;
  rate: Spread;
  /** the handler alone, as many loops as the case's workers (no Redis): the ceiling in this process */
  alone: Spread;
}

/** Scenario 9: key-ordered lanes against one entry at a time per shard, and batch handlers against the raw loop. */
export interface ConsumptionFigures {
  /** `inFlight`: handlers in flight when a call started, on average (of 4 × lanes): how full the lanes were. */
  lanes: { lanes: number; ideal: number; rate: Spread; inFlight: Spread }[];
  drain: { total: number; raw: Spread; batch: Spread; single: Spread; batchShare: Spread };
}

export const SECTION_4A = '## 4a. Rebalance after a join, step by step';
export const SECTION_9 = '## 9. Key-ordered lanes and batch handlers';
export const SECTION_3 = '## 3. Producer';
export const SECTION_7 = '## 7. Redis CPU per entry';
/** Scenario 11's heading inside sections 3 and 7. */
export const SEND_SUBSECTION = '### `send()` one entry at a time';
export const SECTION_12 = '## 12. What consuming one entry costs';
/** The last part of section 6, written by `npm run bench:heap` (and by the full run). */
export const HEAP_SECTION = '### Peak heap under load';
export const SECTION_6 = '## 6. Memory';

/** One run of the peak-heap comparison: the live heap's peak and its level before the run (MiB). */
export interface HeapRun {
  peakMiB: number;
  baseMiB: number;
  handled: number;
  /** The most entries held at once: the raw loop's largest reply, the members' budget peak. */
  buffered: number;
}

/** Section 6, peak heap: 64 members / 1,024 shards against one raw blocking read loop. */
export interface HeapFigures {
  /** Entries written before each run (over 1,024 shards). */
  backlog: number;
  seconds: number;
  raw: HeapRun;
  /** The default budget (8,000 entries for the 64 members). */
  shared: HeapRun;
  /** A budget of 64,000: 1,000 per member, as before the budget was shared. */
  each: HeapRun;
  /** Load average (1 / 5 / 15 min) before and after. */
  load: { before: string; after: string };
}

/** The peak-heap part of section 6. `machine`: where and with what it was measured. */
export function heapSection(h: HeapFigures, machine: string): string[] {
  const mib = (n: number) => `${n.toFixed(1)} MiB`;
  const ratio = (run: HeapRun, of: (r: HeapRun) => number) => `${(of(run) / of(h.raw)).toFixed(2)} ×`;
  const growth = (r: HeapRun) => r.peakMiB - r.baseMiB;
  const line = (label: string, r: HeapRun) =>
    row([label, int(r.buffered), mib(r.peakMiB), ratio(r, (x) => x.peakMiB), mib(growth(r)), ratio(r, growth), int(r.handled)]);
  return [
    HEAP_SECTION,
    '',
    `Measured by \`npm run bench:heap\` on ${machine}. Load average (1 / 5 / 15 min) ${h.load.before} at the start,`,
    `${h.load.after} at the end (on 2 cores, above 3 the entries handled mean little; the heap figures less so).`,
    '',
    `${int(h.backlog)} entries of about 200 bytes written over 1,024 shards before each run; each run consumes them`,
    `for ${h.seconds} s with a handler that awaits ~1 ms, 64 calls at a time. The live heap is sampled every`,
    '250 ms after a forced collection; "growth" is its peak less its level before the run. Goal: the members\'',
    "peak heap at most 1.5 × the raw loop's.",
    '',
    ...header('consumer', 'entries held at most', 'peak live heap', '× raw', 'growth', 'growth × raw', 'entries handled'),
    line('raw XREADGROUP BLOCK loop, COUNT 8 per shard', h.raw),
    line('64 members, one client, `maxBufferedEntriesPerClient` 8,000 (default)', h.shared),
    line('64 members, one client, 64,000 (1,000 each, as before the budget)', h.each),
    '',
    'The raw loop holds one reply at a time (up to 8,192 entries); the members hold what the budget',
    "lets them (`stats().clientBuffer.peakEntries`), and their handlers' calls. Before the members of",
    "one process shared their join's `XGROUP CREATE`s, the peak was the join itself: 64 × 1,024",
    'commands in flight at once, 72 to 81 MiB live before any entry was read.',
    '',
  ];
}

const BENCHMARKS_FILE = path.resolve(__dirname, '../../docs/benchmarks.md');

/**
 * Replaces the part of docs/benchmarks.md that starts at `heading` (up to the next `## `) with
 * `section`. A part not there yet goes where `place` says: before the heading `before`, or at the end
 * of the section `within` (a part of a section, as HEAP_SECTION is of section 6), or else at the end
 * of the file. A scenario measured on its own (`npm run bench:consumption`, …) leaves the rest of the
 * file as the last full run wrote it.
 */
export function spliceSection(heading: string, section: string, place: { before?: string; within?: string } = {}): void {
  let doc = fs.readFileSync(BENCHMARKS_FILE, 'utf8');
  if (!doc.includes(heading)) {
    const before = place.before === undefined ? -1 : doc.indexOf(place.before);
    const parent = place.within === undefined ? -1 : doc.indexOf(place.within);
    const end = parent < 0 ? -1 : doc.indexOf('\n## ', parent + (place.within?.length ?? 0));
    if (before >= 0) doc = `${doc.slice(0, before)}${heading}\n\n${doc.slice(before)}`;
    else if (end >= 0) doc = `${doc.slice(0, end + 1)}${heading}\n\n${doc.slice(end + 1)}`;
    else doc = `${doc.trimEnd()}\n\n${heading}\n`;
  }
  const at = doc.indexOf(heading);
  const next = doc.indexOf('\n## ', at + heading.length);
  const updated = `${doc.slice(0, at)}${section}${next < 0 ? '' : doc.slice(next)}`;
  fs.writeFileSync(BENCHMARKS_FILE, updated.endsWith('\n') ? updated : `${updated}\n`);
}

/** The section that starts with `heading` as docs/benchmarks.md has it now (up to the next `## `), or none. */
function keptSection(heading: string): string[] {
  const doc = fs.existsSync(BENCHMARKS_FILE) ? fs.readFileSync(BENCHMARKS_FILE, 'utf8') : '';
  const at = doc.indexOf(heading);
  if (at < 0) return [];
  const next = doc.indexOf('\n## ', at + heading.length);
  // Up to the newline before the next heading: the section's own blank line ends it.
  return doc.slice(at, next < 0 ? undefined : next).split('\n');
}

/**
 * Replaces the subsection `subheading` (up to the next `### ` or `## `) of the section that starts
 * with `heading` in docs/benchmarks.md with `lines`, or appends it at the section's end: a scenario
 * measured on its own leaves the rest of its section as the last full run wrote it.
 */
export function spliceSubsection(heading: string, subheading: string, lines: string[]): void {
  const file = path.resolve(__dirname, '../../docs/benchmarks.md');
  const doc = fs.readFileSync(file, 'utf8');
  const at = doc.indexOf(`${heading}\n`);
  if (at < 0) throw new Error(`docs/benchmarks.md has no section "${heading}": run npm run bench first`);
  const sectionEnd = ((next) => (next < 0 ? doc.length : next + 1))(doc.indexOf('\n## ', at + heading.length));
  const sub = doc.indexOf(`${subheading}\n`, at);
  const text = `${lines.join('\n')}\n`;
  let updated: string;
  if (sub >= 0 && sub < sectionEnd) {
    const next = doc.indexOf('\n#', sub + subheading.length);
    const end = next < 0 || next + 1 > sectionEnd ? sectionEnd : next + 1;
    updated = doc.slice(0, sub) + text + doc.slice(end);
  } else {
    updated = doc.slice(0, sectionEnd) + text + doc.slice(sectionEnd);
  }
  fs.writeFileSync(file, updated);
}

/** Scenario 11: who wrote the entries. */
export type SendCase = 'plain' | 'auto' | 'ours';

/** Scenario 11: `send()` against `XADD` (plain client, auto-pipelining client) per sends in flight. */
export interface ProducerSendFigures {
  /** 1-minute load average when the measurement ended. */
  load: number;
  levels: {
    inFlight: number;
    plain: Spread;
    auto: Spread;
    ours: Spread;
    vsPlain: Spread;
    vsAuto: Spread;
    redisUs: Record<SendCase, Spread>;
    nodeUs: Record<SendCase, Spread>;
    /** ours / plain XADD, ours / auto-pipelined XADD */
    redisRatio: Record<'plain' | 'auto', Spread>;
    nodeRatio: Record<'plain' | 'auto', Spread>;
  }[];
}

export interface BenchResults {
  environment: Environment;
  coordinator: CoordinatorFigures[];
  drain: DrainRepetition[];
  io: IoFigures[];
  latency: { p50: number; p99: number; samples: number };
  rebalance: { members: number; shards: number; ms: Spread }[];
  recovery: { sessionTimeoutMs: number; ms: Spread }[];
  resize: { label: string; ms: Spread }[];
  memory: MemoryFigures;
  /** Section 6, peak heap under load against one raw read loop (heap-bench.ts). */
  heap?: HeapFigures;
  consumption: ConsumptionFigures;
  restart: RestartFigures[];
  producerSend: ProducerSendFigures;
  cost: CostResults;
  /** Section 13, delayed delivery and deferred retries (schedule-bench.ts). */
  schedule?: ScheduleResults;
}

const us = (n: number) => `${n.toFixed(1)} µs`;
const ms = (n: number) => `${n.toFixed(n < 1 ? 3 : 1)} ms`;
const int = (n: number) => Math.round(n).toLocaleString('en-US');
const row = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;
const header = (...cells: string[]) => [row(cells), row(cells.map(() => '---'))];
const withRange = (s: Spread, f: (n: number) => string) => `${f(s.median)} (${f(s.min)}–${f(s.max)})`;
const pct = (n: number) => `${(n * 100).toFixed(0)} %`;

function verdict(ok: boolean, measured: string, limit: string): string {
  return ok ? 'met' : `**missed** (${measured} vs ${limit})`;
}

function drainSection(r: BenchResults): string[] {
  const d = r.drain;
  const pick = (f: (x: DrainRepetition) => number) => spread(d.map(f));
  const ratio = pick((x) => x.ours / x.raw);
  const vsBull = pick((x) => x.ours / x.bullmq50);
  const produce = pick((x) => x.produceOurs / x.produceRaw);
  const cpuRatio = pick((x) => x.cpuOurs / x.cpuRaw);
  return [
    '## 1. No-op handler: one member against the raw limit and BullMQ',
    '',
    'Pre-filled entries over 8 shards. Raw: one connection, `XREADGROUP COUNT 100` over the 8 streams,',
    'a pipelined `XACK` per batch, read and ack in turn. Ours: one `CoordinatedMember` with 8 workers,',
    'timed from `start()` (join included) to its last acknowledgement. BullMQ: one `Worker` draining the',
    'same number of jobs added with `addBulk` (`removeOnComplete`). Each repetition runs all of them in',
    'turn on the same Redis; ratios are taken within a repetition.',
    '',
    ...header('system', 'entries/s', 'ours / it'),
    row([
      'raw XREADGROUP/XACK loop',
      withRange(
        pick((x) => x.raw),
        int,
      ),
      withRange(ratio, pct),
    ]),
    row([
      'CoordinatedMember',
      withRange(
        pick((x) => x.ours),
        int,
      ),
      '—',
    ]),
    row([
      'BullMQ Worker, concurrency 50',
      withRange(
        pick((x) => x.bullmq50),
        int,
      ),
      `${withRange(vsBull, (n) => n.toFixed(1))} ×`,
    ]),
    row([
      'BullMQ Worker, concurrency 1',
      withRange(
        pick((x) => x.bullmq1),
        int,
      ),
      `${withRange(
        pick((x) => x.ours / x.bullmq1),
        (n) => n.toFixed(1),
      )} ×`,
    ]),
    '',
    SECTION_3,
    '',
    'The same entries (fields `p` and `k`) written in batches of 1,000: `StreamProducer.sendBatch` (key',
    'hashing, JSON encoding, one pipeline) against plain pipelined `XADD`.',
    '',
    ...header('plain pipelined XADD', 'StreamProducer.sendBatch', 'ours / plain'),
    row([
      withRange(
        pick((x) => x.produceRaw),
        int,
      ),
      withRange(
        pick((x) => x.produceOurs),
        int,
      ),
      withRange(produce, pct),
    ]),
    '',
    ...producerSendRates(r.producerSend),
    SECTION_7,
    '',
    '`used_cpu_user + used_cpu_sys` from `INFO cpu` before and after producing and draining, divided by',
    'the entries: the figure that decides how many consumers one Redis serves.',
    '',
    ...header('raw XADD + XREADGROUP/XACK', 'StreamProducer + CoordinatedMember', 'BullMQ (concurrency 50)', 'ours / raw'),
    row([
      withRange(
        pick((x) => x.cpuRaw),
        us,
      ),
      withRange(
        pick((x) => x.cpuOurs),
        us,
      ),
      withRange(
        pick((x) => x.cpuBullmq50),
        us,
      ),
      withRange(cpuRatio, (n) => n.toFixed(2)),
    ]),
    '',
    ...producerSendCpu(r.producerSend),
  ];
}

function ioSection(r: BenchResults): string[] {
  return [
    '## 2. I/O-bound handler (each call awaits ~1 ms)',
    '',
    '64 pre-filled shards. "Ideal" is min(shards, workers) × 1,000 entries/s. `setTimeout(1)` takes',
    'longer than 1 ms in Node, so "the handler alone" measures the ceiling beside each case: as many',
    'loops awaiting the same timer, in the same process, with no Redis and no member. With 64 workers',
    "the member's own CPU per entry decides; `npm run bench:profile` profiles that case and prints where",
    'the time goes. BullMQ keeps no per-key order; ours runs one entry at a time per shard.',
    '',
    ...header('case', 'ideal', 'entries/s', 'of ideal', 'the handler alone', 'of the handler alone'),
    ...r.io.map((c) =>
      row([
        c.label,
        int(c.ideal),
        withRange(c.rate, int),
        pct(c.rate.median / c.ideal),
        int(c.alone.median),
        pct(c.rate.median / c.alone.median),
      ]),
    ),
    '',
  ];
}

function coordinatorSection(r: BenchResults): string[] {
  return [
    '## 5. Coordinator cost as the group grows',
    '',
    'M members with 10 shards each (at most 8,192, the `shardCount` range: 1,000 members have 8,192). Redis time is `usec` per call of the scripts (`EVALSHA`, and `EVAL`',
    'the first time) from `INFO commandstats`, reset before each phase; round trips are measured by the',
    'client, one call at a time. Steady state: every member heartbeats in turn in a STABLE group (3',
    "repetitions, median with min–max). Join: a new member's first heartbeat, without the target",
    'computation it triggers. Commit: the compare-and-set of a full target after one member joined or left.',
    '',
    ...header(
      'members',
      'shards',
      'steady heartbeat: Redis',
      'RTT p50',
      'RTT p99',
      'join: Redis',
      'commit: Redis',
      'assignor (fresh)',
      'assignor (one joins)',
    ),
    ...r.coordinator.map((f) =>
      row([
        f.members,
        f.shards,
        withRange(f.steadyHeartbeat.redisUsSpread, us),
        ms(f.steadyHeartbeat.rttP50Ms),
        ms(f.steadyHeartbeat.rttP99Ms),
        us(f.join.redisUsPerCall),
        withRange(
          { median: f.commit.redisUsSpread.median / 1000, min: f.commit.redisUsSpread.min / 1000, max: f.commit.redisUsSpread.max / 1000 },
          ms,
        ),
        ms(f.assignorMs.fresh),
        ms(f.assignorMs.scaleOut),
      ]),
    ),
    '',
    '![coordinator cost](benchmarks-coordinator.svg)',
    '',
  ];
}

function rebalanceSection(r: BenchResults): string[] {
  return [
    '## 4. Rebalance and recovery',
    '',
    "N - 1 members own the shards; time from the N-th member's `start()` until the group is STABLE with",
    'every shard owned and every member holding its share. Then: 4 members on 16 shards, one dies',
    '(connections cut, no leave); time until the others own its shards in a STABLE group.',
    '',
    ...header('members', 'shards', 'rebalance after a join'),
    ...r.rebalance.map((x) => row([x.members, x.shards, withRange(x.ms, ms)])),
    '',
    ...header('sessionTimeoutMs', 'recovery after a crash'),
    ...r.recovery.map((x) => row([int(x.sessionTimeoutMs), withRange(x.ms, ms)])),
    '',
    '![rebalance](benchmarks-rebalance.svg)',
    '',
    // Measured on its own by `npm run bench:rebalance`: kept as that run wrote it.
    ...keptSection(SECTION_4A),
    '## Latency',
    '',
    `From \`send\` to the handler starting, at a steady 5,000 entries/s, 8 shards, one member with 8 workers, the producer in a process of its own (${int(r.latency.samples)} samples after a tenth of warm-up): p50 ${ms(r.latency.p50)}, p99 ${ms(r.latency.p99)}.`,
    '',
  ];
}

function resizeSection(r: BenchResults): string[] {
  return [
    '## 8. Resharding under load',
    '',
    '4 members (4 workers each) read 8 shards while a producer writes 2,000 keyed entries/s; time from',
    '`resizeShards(8 -> 16)` until the group is STABLE, reads all 16 shards and owns every one. Ordered,',
    'the new shards become readable only after `graceMs` has passed and the old shards are processed up',
    'to the cutover point (docs/resharding.md), so `graceMs` is most of the figure, by design.',
    '',
    ...header('case', 'resize to STABLE on 16 shards'),
    ...r.resize.map((x) => row([x.label, withRange(x.ms, ms)])),
    '',
  ];
}

/** Scenario 9; also printed alone by `npm run bench:restart`. */
export function restartSection(figures: RestartFigures[], measured?: string): string[] {
  const label = { plain: 'plain (a new memberId per process)', static: 'static (`memberInstanceId`)' };
  return [
    '## 10. Rolling restart: static against plain membership',
    '',
    '4 members on 16 shards while a producer writes 1,000 keyed entries/s; each member in turn is',
    'stopped (`stop()`) and, 1 s later (a quick process restart), a new `CoordinatedMember` started in',
    'its place, waiting for the group to be STABLE with every shard owned before the next. Shard moves:',
    "assignments to another member id than the shard's owner before the restarts (from the group's event",
    "log). One run each. The price of static membership: a stopped member's shards wait unread for its",
    'next instance (here 1 s each), up to `sessionTimeoutMs`; plain membership hands them to the others',
    'and back.',
    ...(measured === undefined ? [] : ['', measured]),
    '',
    ...header('membership', 'shard moves', 'shards revoked', 'targets computed', 'entries run twice', 'rolling restart'),
    ...figures.map((f) => row([label[f.mode], int(f.shardMoves), int(f.revocations), int(f.targetCommits), int(f.duplicates), ms(f.ms)])),
    '',
  ];
}

function memorySection(r: BenchResults): string[] {
  const m = r.memory;
  const e = r.environment;
  const machine = `${e.cpus}, ${e.memoryGiB} GiB; Node ${e.node}, Redis ${e.redis}, ioredis ${e.ioredis}; ${e.date}${e.quick ? ' (quick)' : ''}`;
  return [
    SECTION_6,
    '',
    ...header('what', 'measured'),
    row(['Node heap growth, one process running 64 members', `${m.heapMiB.toFixed(1)} MiB`]),
    row(['RSS of that process (the whole benchmark process, with 64 members running)', `${m.rssMiB.toFixed(1)} MiB`]),
    row(['Redis coordinator state per member', `${int(m.redisBytesPerMember)} bytes`]),
    row(['Redis coordinator state per shard', `${int(m.redisBytesPerShard)} bytes`]),
    '',
    "The 64 members share one command connection, one subscriber and the read hub's two connections",
    '(the doorbell and the shared read connection). Redis figures are `used_memory` deltas: 100 → 200',
    'members (1,000 shards), and 1,000 → 2,000 shards (100 members), coordinator keys only.',
    '',
    ...(r.heap ? heapSection(r.heap, machine) : []),
  ];
}

function targetsSection(r: BenchResults): string[] {
  const d = r.drain;
  const ratio = spread(d.map((x) => x.ours / x.raw)).median;
  const vsBull = spread(d.map((x) => x.ours / x.bullmq50)).median;
  const produce = spread(d.map((x) => x.produceOurs / x.produceRaw)).median;
  const cpu = spread(d.map((x) => x.cpuOurs / x.cpuRaw)).median;
  const at = (members: number) => r.coordinator.find((f) => f.members === members);
  const hundred = at(100);
  const thousand = at(1000);
  const sixteen = r.rebalance.find((x) => x.members === 16 && x.shards === 256) ?? r.rebalance.find((x) => x.members === 16);
  const lines = [
    '## Targets',
    '',
    ...header('target', 'measured', 'verdict'),
    row(['no-op throughput ≥ 80 % of the raw limit', pct(ratio), verdict(ratio >= 0.8, pct(ratio), '80 %')]),
    row([
      'no-op throughput ≥ 10 × BullMQ at concurrency 50',
      `${vsBull.toFixed(1)} ×`,
      verdict(vsBull >= 10, `${vsBull.toFixed(1)} ×`, '10 ×'),
    ]),
    row(['producer ≥ 90 % of plain pipelined XADD', pct(produce), verdict(produce >= 0.9, pct(produce), '90 %')]),
    row(['Redis CPU per entry ≤ 1.3 × the raw loop', `${cpu.toFixed(2)} ×`, verdict(cpu <= 1.3, `${cpu.toFixed(2)} ×`, '1.3 ×')]),
    row(['p99 latency < 10 ms at 5,000 entries/s', ms(r.latency.p99), verdict(r.latency.p99 < 10, ms(r.latency.p99), '10 ms')]),
  ];
  const heap = r.heap;
  if (heap) {
    const times = heap.shared.peakMiB / heap.raw.peakMiB;
    lines.push(
      row([
        'peak heap ≤ 1.5 × one raw read loop, 64 members / 1,024 shards under a backlog',
        `${times.toFixed(2)} ×`,
        verdict(times <= 1.5, `${times.toFixed(2)} ×`, '1.5 ×'),
      ]),
    );
  }
  if (sixteen)
    lines.push(
      row([
        `rebalance after a join < 200 ms, 16 members / ${sixteen.shards} shards`,
        ms(sixteen.ms.median),
        verdict(sixteen.ms.median < 200, ms(sixteen.ms.median), '200 ms'),
      ]),
    );
  if (hundred)
    lines.push(
      row([
        'steady heartbeat < 50 µs Redis time, 100 members / 1,000 shards',
        us(hundred.steadyHeartbeat.redisUsPerCall),
        verdict(hundred.steadyHeartbeat.redisUsPerCall < 50, us(hundred.steadyHeartbeat.redisUsPerCall), '50 µs'),
      ]),
    );
  if (thousand) {
    const assignor = Math.max(thousand.assignorMs.fresh, thousand.assignorMs.scaleOut);
    const commit = thousand.commit.redisUsPerCall / 1000;
    const size = `1,000 members / ${thousand.shards.toLocaleString('en-US')} shards`;
    lines.push(row([`assignor < 50 ms, ${size}`, ms(assignor), verdict(assignor < 50, ms(assignor), '50 ms')]));
    lines.push(row([`commit < 10 ms Redis time, ${size}`, ms(commit), verdict(commit < 10, ms(commit), '10 ms')]));
  }
  const batchShare = r.consumption.drain.batchShare.median;
  lines.push(row(['no-op batch handler ≥ 95 % of the raw limit', pct(batchShare), verdict(batchShare >= 0.95, pct(batchShare), '95 %')]));
  for (const goal of producerSendGoals(r.producerSend)) lines.push(row(goal));
  for (const io of r.io.filter((c) => !c.label.startsWith('BullMQ'))) {
    const share = io.rate.median / io.ideal;
    lines.push(
      row([`I/O-bound within 10 % of ideal: ${io.label}`, pct(share), share >= 0.9 ? 'met' : `**missed** (${pct(share)}; see scenario 2)`]),
    );
  }
  lines.push('');
  return lines;
}

/** Scenario 9; `machine` is set when `npm run bench:consumption` measured it apart from the full run. */
export function consumptionSection(c: ConsumptionFigures, machine?: string): string[] {
  const [one, many] = [c.lanes[0], c.lanes[c.lanes.length - 1]];
  const speedup = many.rate.median / one.rate.median;
  return [
    SECTION_9,
    '',
    ...(machine ? [`Measured by \`npm run bench:consumption\` on ${machine}.`, ''] : []),
    `**Lanes.** One member owning 4 shards of pre-filled entries over 1,000 routing keys, a handler that`,
    `awaits ~1 ms (a timer), \`lanes\` per shard and \`runtimeMaxConcurrency\` 4 × lanes; timed from`,
    `the first handler call to the last (the join is left out). Ideal: 4 × lanes × 1,000 entries/s.`,
    '',
    ...header('lanes', 'entries/s', 'ideal', 'of ideal', 'handlers in flight (of 4 × lanes)'),
    ...c.lanes.map((l) =>
      row([l.lanes, withRange(l.rate, int), int(l.ideal), pct(l.rate.median / l.ideal), withRange(l.inFlight, (n) => n.toFixed(1))]),
    ),
    '',
    `Lanes ${many.lanes} against lanes ${one.lanes}: ${speedup.toFixed(1)} × (ideal ${many.lanes} ×). With the lanes kept full`,
    `(the last column), what is left between the figure and the ideal is the time each call takes`,
    `beyond its 1 ms on this machine: timer lateness and the member's own work per entry (read,`,
    `decode, call, fenced ack), which one process does for every lane.`,
    '',
    `**Batches.** ${int(c.drain.total)} pre-filled entries over 8 shards, a no-op handler: the raw`,
    `XREADGROUP/XACK loop of scenario 1, one member with \`batch: { maxSize: 100 }\` (one handler call and`,
    `one fenced XACK per batch), timed from its first batch to its last acknowledgement (the raw loop from`,
    `its first read), and, for reference, the member of scenario 1 handling entries one by one (timed`,
    `from \`start()\`, join included). Goal: batches at ≥ 95 % of the raw loop.`,
    '',
    ...header('raw loop', 'batch handler', 'one by one', 'batch / raw'),
    row([withRange(c.drain.raw, int), withRange(c.drain.batch, int), withRange(c.drain.single, int), withRange(c.drain.batchShare, pct)]),
    '',
  ];
}

/** What one case of `npm run bench:cost` cost per entry, over its repetitions. */
export interface CostFigures {
  label: string;
  rate: Spread;
  /** µs per entry */
  nodeCpu: Spread;
  redisCpu: Spread;
  /** per 1,000 entries */
  reads: Spread;
  scripts: Spread;
  xacks: Spread;
  gcs: Spread;
  /** bytes the clients sent Redis per entry */
  bytesIn: Spread;
}

/** Scenario 12: the no-op case (raw, ours), the I/O-bound one, the handler alone, the load average at both ends. */
export interface CostResults {
  noop: CostFigures[];
  io: CostFigures | undefined;
  alone: { rate: Spread; nodeCpu: Spread } | undefined;
  load: { before: string; after: string };
}

/** Scenario 12; `machine` is set when `npm run bench:cost` measured it apart from the full run. */
export function costSection({ noop, io, alone, load }: CostResults, machine?: string): string[] {
  const f2 = (n: number) => n.toFixed(2);
  const cases = [...noop, ...(io ? [io] : [])];
  const lines = [
    SECTION_12,
    '',
    ...(machine ? [`Measured by \`npm run bench:cost\` on ${machine}.`] : []),
    `Load average (1 / 5 / 15 min) ${load.before} at the start, ${load.after} at the end: on 2 cores, above 2`,
    'this process waited for a core, and the entries/s fall with it.',
    '',
    'Per entry consumed, in measures a loaded machine moves little: Node CPU (`process.cpuUsage`), Redis',
    'CPU (`INFO cpu`), and per 1,000 entries the reads (`XREADGROUP`), script calls (`EVALSHA`: the gap',
    'check and the fenced acks), `XACK`s (one per shard and ack call, inside the scripts for ours), the',
    "process's garbage collections, and the bytes the clients sent Redis. No-op: 8 pre-filled shards,",
    'the raw loop of scenario 1 against one member with 8 workers (`batchSize` 100,',
    '`maxBufferedEntries` 1,600), timed from `start()` to its last acknowledgement. I/O-bound: 64',
    'pre-filled shards, one member with 64 workers and a handler that awaits ~1 ms, against the handler',
    'alone (64 loops on the same timer). Entries/s depend on the load; the other columns much less.',
    '',
    ...header('case', 'entries/s', 'Node CPU', 'Redis CPU', 'reads /1k', 'scripts /1k', 'XACKs /1k', 'GCs /1k', 'bytes sent'),
    ...cases.map((c) =>
      row([
        c.label,
        withRange(c.rate, int),
        withRange(c.nodeCpu, us),
        withRange(c.redisCpu, (n) => `${f2(n)} µs`),
        c.reads.median.toFixed(1),
        c.scripts.median.toFixed(1),
        c.xacks.median.toFixed(1),
        c.gcs.median.toFixed(2),
        `${c.bytesIn.median.toFixed(1)} B`,
      ]),
    ),
    ...(alone
      ? [row(['the handler alone (64 loops)', withRange(alone.rate, int), withRange(alone.nodeCpu, us), '', '', '', '', '', ''])]
      : []),
    '',
  ];
  if (noop.length === 2) {
    const [raw, ours] = noop;
    lines.push(
      `No-op, ours against raw (medians): Node CPU ${f2(ours.nodeCpu.median / raw.nodeCpu.median)} ×, Redis CPU ${f2(ours.redisCpu.median / raw.redisCpu.median)} ×, entries/s ${f2(ours.rate.median / raw.rate.median)} ×.`,
    );
  }
  if (io && alone) lines.push(`I/O-bound: ${pct(io.rate.median / alone.rate.median)} of the handler alone.`);
  lines.push('');
  return lines;
}

/** Above this load average, wall-clock rates are not figures (other work shares the two cores). */
const LOADED = 3;

/** A ratio of scenario 11. */
const x = (n: number) => `${n.toFixed(2)} ×`;

/** Scenario 11's subsection heading, and where it was measured when apart from the full run. */
function sendSubsectionHead(machine: string | undefined): string[] {
  return [SEND_SUBSECTION, '', ...(machine ? [`Measured by \`npm run bench:producer\` on ${machine}.`, ''] : [])];
}

/** Scenario 11's goals (SPEC 9.5's producer, docs/runtime.md "Merged sends"): target, measured, verdict. */
export function producerSendGoals(f: ProducerSendFigures): [string, string, string][] {
  const at = (inFlight: number) => f.levels.find((l) => l.inFlight === inFlight);
  const goals: [string, string, string][] = [];
  const one = at(1);
  const many = at(64);
  const why = {
    lone:
      'each call is one round trip, as an XADD is, but a script call: an EVALSHA of an empty script with the same arguments ' +
      'measured 0.83 × plain XADD alone, and the write script (routing check, write log, XADD) takes 14–19 µs of Redis time ' +
      'against 1–1.6 µs for an XADD (section 7); the routing check and the write log are what keep per-key order and answer a resent call',
    redis:
      "per entry Redis makes each field value a Lua string and passes it back into XADD through the script's redis.call, " +
      'about 1.9 µs more per entry than a client XADD (callgrind); the routing check and the write log are paid once per shard and flush (section 7)',
  };
  const goal = (target: string, value: number, ok: boolean, limit: string, reason: string) =>
    goals.push([target, x(value), ok ? 'met' : `**missed** (${x(value)} vs ${limit}: ${reason})`]);
  if (one) goal('send() at 1 in flight ≥ 0.8 × plain XADD', one.vsPlain.median, one.vsPlain.median >= 0.8, '0.8 ×', why.lone);
  if (many) {
    goal('send() at 64 in flight ≥ 0.9 × auto-pipelined XADD', many.vsAuto.median, many.vsAuto.median >= 0.9, '0.9 ×', why.redis);
    goal('send() at 64 in flight ≥ 1.5 × plain XADD', many.vsPlain.median, many.vsPlain.median >= 1.5, '1.5 ×', why.redis);
    const redis = many.redisRatio.auto.median;
    goal('Redis CPU per sent entry at 64 in flight ≤ 2 × XADD (auto-pipelined)', redis, redis <= 2, '2 ×', why.redis);
    const node = many.nodeRatio.auto.median;
    goal('Node CPU per sent entry at 64 in flight ≤ 1.5 × XADD (auto-pipelined)', node, node <= 1.5, '1.5 ×', 'see the table');
  }
  return goals;
}

/** Scenario 11's rates, in section 3; `machine` is set when `npm run bench:producer` measured it apart from the full run. */
export function producerSendRates(f: ProducerSendFigures, machine?: string): string[] {
  return [
    ...sendSubsectionHead(machine),
    'Entries of 1,000 keys over 8 shards, one at a time: `StreamProducer.send()` on a plain ioredis client',
    'against `XADD` of the same fields to 8 streams, on a plain client and on one with',
    '`enableAutoPipelining`, with 1, 64 and 1,024 calls in flight (a new one as each resolves). Each',
    'repetition runs the three in turn on one Redis, and the ratios are taken within it. CPU per entry is',
    'in section 7. The machine load matters: the figures of a busy machine spread.',
    '',
    ...(f.load > LOADED
      ? [
          `**Measured on a busy machine (load average ${f.load.toFixed(2)} at the end, above ${LOADED}): the rates and their`,
          'verdicts say little; the CPU per entry less so, and the instruction counts of section 7 not at all.**',
          '',
        ]
      : []),
    ...header('in flight', 'plain XADD /s', 'auto-pipelined XADD /s', 'send() /s', 'ours / plain', 'ours / auto'),
    ...f.levels.map((l) =>
      row([
        int(l.inFlight),
        withRange(l.plain, int),
        withRange(l.auto, int),
        withRange(l.ours, int),
        withRange(l.vsPlain, x),
        withRange(l.vsAuto, x),
      ]),
    ),
    '',
    ...header('goal', 'measured', 'verdict'),
    ...producerSendGoals(f).map(row),
    '',
  ];
}

/** Scenario 11's CPU per entry, in section 7. */
export function producerSendCpu(f: ProducerSendFigures, machine?: string): string[] {
  return [
    ...sendSubsectionHead(machine),
    "The sends of section 3's `send()` one entry at a time: Redis' `used_cpu_user + used_cpu_sys` (`INFO cpu`) and this process'",
    '`process.cpuUsage()` over the timed phase, divided by the entries.',
    '',
    ...header(
      'in flight',
      'Redis µs/entry: plain / auto / ours',
      'ours / plain',
      'ours / auto',
      'Node µs/entry: plain / auto / ours',
      'ours / plain',
      'ours / auto',
    ),
    ...f.levels.map((l) =>
      row([
        int(l.inFlight),
        `${us(l.redisUs.plain.median)} / ${us(l.redisUs.auto.median)} / ${us(l.redisUs.ours.median)}`,
        withRange(l.redisRatio.plain, x),
        withRange(l.redisRatio.auto, x),
        `${us(l.nodeUs.plain.median)} / ${us(l.nodeUs.auto.median)} / ${us(l.nodeUs.ours.median)}`,
        withRange(l.nodeRatio.plain, x),
        withRange(l.nodeRatio.auto, x),
      ]),
    ),
    '',
    ...SEND_REDIS_COST,
  ];
}

/**
 * Where a sent entry's Redis time goes, counted once with callgrind (instructions do not depend on
 * the machine's load, which was high): the reason behind the Redis CPU goal's verdict.
 */
const SEND_REDIS_COST = [
  'Where the Redis time goes (instructions under `valgrind --tool=callgrind`, which the machine load',
  'does not change; 2026-12-01, Redis 7.0.15; reading, parsing and running the commands): a plain',
  '`XADD` of one entry costs Redis about 12,500 instructions. One `appendEntries` call of one entry costs',
  'about 95,500 (142,000 before its write log became one string record): about 18,000 to set up the Lua',
  'call and its `KEYS`/`ARGV` tables, 27,000 for the routing marker read and the write log read and',
  "write, 11,000 for the `XADD` through `redis.call`, the rest parsing the call, the script's own work",
  'and garbage, and its reply. At 64 in flight a call carries about 8 entries and a sent entry costs',
  'about 32,700 instructions (37,800 before) against 12,100 for an auto-pipelined `XADD`: each field value',
  'is made a Lua string, then an argument of `XADD` again, and the `XADD` reply a Lua string, about',
  '15,000 instructions per entry before any per-call cost. A write checked against the routing marker',
  "in the shard's slot (SPEC 9.5) has to run in a script; that per-entry cost is what keeps Redis CPU",
  'above 2 × a raw `XADD`.',
  "Delayed delivery's two schedule keys (`KEYS[4]`, `KEYS[5]`) and its due-time string (`ARGV[8]`,",
  'empty when no entry of the call is delayed) cost a call of one entry about 6,500 more (2026-12-02,',
  '`readQueryFromClient` inclusive, 2,000 calls each, plain `EVALSHA`: 88,900 for `appendEntries-3.lua`',
  'before the merge, 95,400 for `appendEntries-5.lua`): about 3,500 for the three arguments (the old',
  'script given them and ignoring them: 92,500), the rest for the longer script (its schedule',
  "functions are made on every run, as Lua makes a script's local functions).",
  '',
];

/** docs/benchmarks.md */
export function report(r: BenchResults): string {
  const e = r.environment;
  return [
    '# Benchmarks',
    '',
    'Written by `npm run bench` (`npm run bench -- --quick` for a smoke run); do not edit by hand.',
    'Redis Cluster figures (per-master load, CPU per entry against a single node, the cost of `WAIT`) are',
    "`npm run bench:cluster`'s, in [benchmarks-cluster.md](benchmarks-cluster.md).",
    '',
    `Measured ${e.date} on ${e.cpus}, ${e.memoryGiB} GiB; Node ${e.node}, Redis ${e.redis}, ioredis ${e.ioredis}, BullMQ ${e.bullmq}.`,
    `${e.repetitions} repetition(s) per figure: the median, with min–max in parentheses.${e.quick ? ' **Quick run: small sizes, one repetition.**' : ''}`,
    '',
    ...targetsSection(r),
    ...drainSection(r),
    ...ioSection(r),
    ...rebalanceSection(r),
    ...coordinatorSection(r),
    ...memorySection(r),
    ...resizeSection(r),
    ...consumptionSection(r.consumption),
    ...restartSection(r.restart),
    ...costSection(r.cost),
    ...(r.schedule ? ['', ...scheduleSection(r.schedule)] : []),
  ].join('\n');
}
