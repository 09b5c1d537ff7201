import { afterAll, expect, it, onTestFinished } from 'vitest';
import type { CheckReport, FaultKind } from './checker';
import { ALL_FAULT_KINDS, selectedFaultKinds } from './fault-selection';
import { ChaosHarness } from './harness';
import { formatReport } from './report';

/**
 * The short tier runs every fault kind once, dealt out over `SHORT_TIER_HARNESSES` harnesses that run
 * side by side (each with its own redis-server, member processes and load), in one test: vitest runs
 * test files one at a time on a 2-core machine (its default is a worker per core but one), so
 * separate files would add up. About how long each kind takes in a lane (seconds, with its recovery: the
 * mean of the "ms in all" that each fault's progress line prints, over two runs of this tier on a 2-core
 * machine at a load of 12-18; the estimates before them left the second lane 20-35 s behind the first;
 * the LONG_TIER_ONLY and cluster kinds, dealt out by no lane here, keep their earlier figures): the
 * harnesses are balanced by it, so the slowest decides the wall time.
 */
const COST_S: Record<FaultKind, number> = {
  kill: 6.8,
  graceful: 7.7,
  join: 7.4,
  pause: 2.9,
  partition: 2.9,
  reset: 0.2,
  'redis-restart': 1.8,
  'latency-low': 4.1,
  'latency-session': 4.1,
  'latency-beyond': 4.4,
  jitter: 2.6,
  'lost-read': 7.6,
  'lost-ack': 0.1,
  'lost-heartbeat': 0.4,
  'dead-letter-wrongtype': 2.8,
  'dead-letter-oom': 1.2,
  'partial-batch': 3.3,
  'long-graceful': 7.6,
  'grow-ordered': 4.3,
  'grow-unordered': 0.4,
  'shrink-ordered': 3.9,
  'shrink-unordered': 16.4,
  'new-group': 13.4,
  'delete-drained': 3.1,
  'stale-producer': 4.9,
  'redis-flush-restart': 1.7,
  'clock-skew': 3.1,
  'duplicate-id': 3.8,
  'unsafe-lease': 14.3,
  'zombie-dead-letter': 17.7,
  'revoke-twice': 3.4,
  'group-keys-lost': 4.4,
  // Each watches every shard read for 1.6 owned-but-unread bounds (9.6 s); half-open replaces a member first.
  'late-answers': 10,
  'late-join': 10.5,
  'half-open-commands': 11,
  'half-open-reads': 11,
  'half-open-acks': 25.6,
  'half-open-wake': 11,
  'freeze-on-stop': 10.7,
  'reset-offsets': 1.6,
  'delete-resize-back': 6.8,
  // Up to three letters each, a take-over time (1 s) or two per letter.
  'dead-letter-replay': 3.5,
  'dead-letter-purge': 3.3,
  // Two Nest processes' start (seconds; 6 s at a load of 12), the link faults (a reply held 2.3 s, a half-open wait of 3.5 s), the drain.
  transport: 34,
  // A process start or two (seconds on a busy machine); the zombie variant waits three sessions more.
  'static-restart': 6,
  // On the cluster only (not in this tier's lanes).
  failover: 8,
  'slot-move': 2,
};

/**
 * Kinds the short tier leaves to the long one (and runs with RSC_CHAOS_FAULTS naming them). Each of
 * the seam kinds that watches the shards for 1.6 owned-but-unread bounds costs about 10 s, and all
 * nine doubled this tier (55 s to 110 s), taking npm test past its 5 minutes; so the short tier runs
 * the cheap seam kinds (reset-offsets, delete-resize-back, freeze-on-stop) and one half-open
 * connection, the acks' (the one whose defect hung stop() as well), and leaves these five here.
 */
export const LONG_TIER_ONLY: ReadonlySet<FaultKind> = new Set<FaultKind>([
  'late-answers',
  'late-join',
  'half-open-commands',
  'half-open-reads',
  'half-open-wake',
]);

/** Harnesses side by side (RSC_CHAOS_HARNESSES; 1 runs every kind in one harness, about 100 s). */
export const SHORT_TIER_HARNESSES = Math.max(1, Number(process.env.RSC_CHAOS_HARNESSES ?? 2) || 2);

/**
 * The kinds of lane `lane` (1-based): every kind but LONG_TIER_ONLY in exactly one lane, the longest first into the
 * lane with the least work so far. With RSC_CHAOS_FAULTS set, lane 1 runs just those kinds and the
 * others nothing.
 */
export function shortTierKinds(lane: number, env = process.env.RSC_CHAOS_FAULTS): FaultKind[] {
  if (env !== undefined && env.trim() !== '') return lane === 1 ? selectedFaultKinds(env) : [];
  const load = Array.from({ length: SHORT_TIER_HARNESSES }, () => ({ seconds: 0, kinds: [] as FaultKind[] }));
  const byCost = ALL_FAULT_KINDS.filter((kind) => !LONG_TIER_ONLY.has(kind)).sort((a, b) => COST_S[b] - COST_S[a] || a.localeCompare(b));
  for (const kind of byCost) {
    const lightest = load.reduce((best, lane) => (lane.seconds < best.seconds ? lane : best));
    lightest.seconds += COST_S[kind];
    lightest.kinds.push(kind);
  }
  return load[lane - 1].kinds;
}

/**
 * Whether lane `lane`'s member processes read through the shared path (a companion member beside
 * each): even lanes do, odd lanes read alone (a blocking XREADGROUP), so the short tier covers both
 * ways a member reads. RSC_CHAOS_SHARED_READS=1 (or 0) sets it for every lane.
 */
export function sharedReads(lane: number, env = process.env.RSC_CHAOS_SHARED_READS): boolean {
  if (env !== undefined && env.trim() !== '') return env.trim() === '1';
  return lane % 2 === 0;
}

interface LaneResult {
  lane: number;
  kinds: FaultKind[];
  order: FaultKind[];
  check: () => CheckReport;
  harness: ChaosHarness;
}

/** Whether the report shows a broken promise (what the expectations below fail on). */
function broken(report: CheckReport): boolean {
  const lists = [
    report.unrecovered,
    report.notReplayed,
    report.deadLetterOutcomes,
    report.producerStalls,
    report.lost,
    report.trimmedUnhandled,
    report.stuck,
    report.orderViolations,
    report.early,
    report.overlaps,
    report.keyOverlaps,
    report.unfencedDeadLetters,
    report.grantDuplicates,
    report.writtenTwice,
    report.unexplainedDuplicates,
    report.transport,
  ];
  return lists.some((list) => list.length > 0);
}

/** One lane: a harness, its kinds once each in an order the seed decides, the load on a while after, the drain. */
async function runLane(lane: number, kinds: FaultKind[], seed: number): Promise<LaneResult> {
  // 200 entries/s a harness (the soak: 1,000): two harnesses share two cores, and a starved member
  // process looks like a faulty one. Still thousands of entries a lane, on every shard.
  const harness = await ChaosHarness.start({
    seed,
    rate: 200,
    sharedReads: sharedReads(lane),
    progress: (line) => process.stderr.write(`  [${lane}] ${line}\n`),
  });
  const order = [...kinds].sort(() => harness.random() - 0.5);
  for (const kind of order) {
    await new Promise((resolve) => setTimeout(resolve, 200 + harness.random() * 300));
    await harness.inject(kind);
  }
  // Keep the load on a while after the last fault: an entry stranded by it must be seen stuck.
  await new Promise((resolve) => setTimeout(resolve, 3000));
  return { lane, kinds, order, check: await harness.drainAndStop(), harness };
}

/**
 * The lanes to run (1-based): every lane, or only `RSC_CHAOS_LANE` (its kinds, its order, its victims:
 * the seed's schedule of that lane exactly, alone on the machine). A replay with RSC_CHAOS_FAULTS set
 * to a lane's printed order is no replay: the seed shuffles that list again (another order).
 */
export function shortTierLanes(env = process.env.RSC_CHAOS_LANE): number[] {
  const all = Array.from({ length: SHORT_TIER_HARNESSES }, (_, i) => i + 1);
  if (env === undefined || env.trim() === '') return all;
  const lane = Number(env);
  if (!all.includes(lane)) throw new Error(`RSC_CHAOS_LANE: no lane "${env}" (lanes: ${all.join(', ')})`);
  return [lane];
}

/** The short tier: every lane at once, then every promise of the checker for each. */
export function shortTier(): void {
  // The last way out: whatever the test did (a timeout leaves its lanes running), nothing the
  // harnesses started outlives the file (member processes, proxies, redis-servers).
  afterAll(() => ChaosHarness.stopAll('the short tier ended'), 60_000);
  const seed = Number(process.env.RSC_CHAOS_SEED ?? 20261129);
  const only = shortTierLanes();
  const lanes = Array.from({ length: SHORT_TIER_HARNESSES }, (_, i) => (only.includes(i + 1) ? shortTierKinds(i + 1) : []));
  const title = lanes
    .filter((k) => k.length > 0)
    .map((k) => k.join(', '))
    .join(' | ');
  it(`reliability harness (short tier), each kind once in ${SHORT_TIER_HARNESSES} harness(es) side by side (seed ${seed}): ${title}: nothing lost or stuck, order kept, no overlap, dead letters fenced, every duplicate explained`, async () => {
    // Also when the test times out: vitest fails it, but its lanes would go on (waits of minutes,
    // member processes, redis-servers) and keep the process from exiting.
    onTestFinished(() => ChaosHarness.stopAll('the short tier test finished (passed, failed or timed out)'));
    const results: (LaneResult | undefined)[] = [];
    try {
      results.push(...(await Promise.all(lanes.map((kinds, i) => (kinds.length > 0 ? runLane(i + 1, kinds, seed) : undefined)))));
      // Every lane checked before any expectation fails: a lane with a broken promise keeps its record
      // files (their path goes to stderr when its harness stops), with what was written beside them.
      const checked = results.flatMap((result) => (result ? [{ result, report: result.check() }] : []));
      for (const { result, report } of checked) if (broken(report)) result.harness.keepRecords = true;
      for (const { result, report } of checked) {
        const summary = `lane ${result.lane}, seed ${seed} (replay: RSC_CHAOS_SEED=${seed} RSC_CHAOS_HARNESSES=${SHORT_TIER_HARNESSES} RSC_CHAOS_LANE=${result.lane} npx vitest run test/reliability/reliability.test.ts; order: ${result.order.join(',')})\n${formatReport(report)}`;
        console.info(summary);
        for (const kind of result.kinds)
          expect(report.faults.filter((f) => f.kind === kind).length, `${kind}\n${summary}`).toBeGreaterThanOrEqual(1);
        expect(report.produced, summary).toBeGreaterThan(200);
        expect(report.unrecovered, summary).toEqual([]);
        expect(report.notReplayed, summary).toEqual([]);
        expect(report.deadLetterOutcomes, summary).toEqual([]);
        expect(report.producerStalls, summary).toEqual([]);
        expect(report.lost, summary).toEqual([]);
        expect(report.trimmedUnhandled, summary).toEqual([]);
        expect(report.stuck, summary).toEqual([]);
        expect(report.orderViolations, summary).toEqual([]);
        expect(report.early, summary).toEqual([]);
        expect(report.overlaps, summary).toEqual([]);
        expect(report.keyOverlaps, summary).toEqual([]);
        expect(report.unfencedDeadLetters, summary).toEqual([]);
        expect(report.grantDuplicates, summary).toEqual([]);
        expect(report.writtenTwice, summary).toEqual([]);
        expect(report.unexplainedDuplicates, summary).toEqual([]);
        expect(report.transport, summary).toEqual([]);
      }
    } finally {
      await Promise.all(results.map((result) => result?.harness.stop()));
      // A lane that threw left its harness running (and kept its records): stopped here.
      await ChaosHarness.stopAll('a lane of the short tier failed');
    }
  }, 600_000);
}
