import { describe, expect, it } from 'vitest';
import type { FaultKind } from './checker';
import { ALL_FAULT_KINDS, selectedFaultKinds } from './faults';
import { ChaosHarness } from './harness';
import { formatReport } from './report';

/**
 * The short tier runs every fault kind once, split over `SHORT_TIER_FILES` test files that vitest
 * runs in parallel (test/reliability.test.ts, test/reliability-2.test.ts, ...), each with a harness
 * of its own. About how long each kind takes there (seconds, with its recovery, measured on a
 * 2-core machine): the files are balanced by it, so the slowest one decides the wall time.
 */
const COST_S: Record<FaultKind, number> = {
  kill: 1.5, graceful: 2, join: 1.5, pause: 2.5, partition: 2.5, reset: 0.5, 'redis-restart': 2.5,
  'latency-low': 2.2, 'latency-session': 4.3, 'latency-beyond': 3.5, jitter: 2.2,
  'lost-read': 7.5, 'lost-ack': 0.5, 'lost-heartbeat': 0.5,
  'dead-letter-wrongtype': 2.3, 'dead-letter-oom': 1.3, 'partial-batch': 2.2, 'long-graceful': 4,
  'grow-ordered': 2.5, 'grow-unordered': 0.5, 'shrink-ordered': 2.5, 'shrink-unordered': 0.5,
  'new-group': 7, 'delete-drained': 3, 'stale-producer': 4, 'redis-flush-restart': 3, 'clock-skew': 2, 'duplicate-id': 2,
  'unsafe-lease': 8, 'zombie-dead-letter': 8, 'revoke-twice': 3, 'group-keys-lost': 5,
};

export const SHORT_TIER_FILES = 3;

/**
 * The kinds of file `part` (1-based) of the short tier: every kind in exactly one file, the longest
 * first into the file with the least work so far. With RSC_CHAOS_FAULTS set, file 1 runs just those
 * kinds and the others nothing.
 */
export function shortTierKinds(part: number, env = process.env.RSC_CHAOS_FAULTS): FaultKind[] {
  if (env !== undefined && env.trim() !== '') return part === 1 ? selectedFaultKinds(env) : [];
  const load = Array.from({ length: SHORT_TIER_FILES }, () => ({ seconds: 0, kinds: [] as FaultKind[] }));
  const byCost = [...ALL_FAULT_KINDS].sort((a, b) => COST_S[b] - COST_S[a] || a.localeCompare(b));
  for (const kind of byCost) {
    const lightest = load.reduce((best, file) => (file.seconds < best.seconds ? file : best));
    lightest.seconds += COST_S[kind];
    lightest.kinds.push(kind);
  }
  return load[part - 1].kinds;
}

/**
 * One file of the short tier: its kinds once each, in an order the seed decides, then every promise
 * of the checker.
 */
export function shortTier(part: number): void {
  const kinds = shortTierKinds(part);
  const seed = Number(process.env.RSC_CHAOS_SEED ?? 20261129);
  describe(`reliability harness (short tier, ${part} of ${SHORT_TIER_FILES})`, () => {
    it.skipIf(kinds.length === 0)(`${kinds.join(', ')} once each (seed ${seed}): nothing lost or stuck, order kept, no overlap, dead letters fenced, every duplicate explained`, async () => {
      const harness = await ChaosHarness.start({ seed, progress: (line) => process.stderr.write(`  ${line}\n`) });
      try {
        const order = [...kinds].sort(() => harness.random() - 0.5);
        for (const kind of order) {
          await new Promise((resolve) => setTimeout(resolve, 200 + harness.random() * 300));
          await harness.inject(kind);
        }
        // Keep the load on a while after the last fault: an entry stranded by it must be seen stuck.
        await new Promise((resolve) => setTimeout(resolve, 3000));
        const report = await harness.finish();
        const summary = `seed ${seed} (replay: RSC_CHAOS_SEED=${seed} RSC_CHAOS_FAULTS=${order.join(',')} npx vitest run test/reliability.test.ts)\n${formatReport(report)}`;
        console.info(summary);
        for (const kind of kinds) expect(report.faults.filter((f) => f.kind === kind).length, `${kind}\n${summary}`).toBeGreaterThanOrEqual(1);
        expect(report.produced, summary).toBeGreaterThan(200);
        expect(report.unrecovered, summary).toEqual([]);
        expect(report.lost, summary).toEqual([]);
        expect(report.stuck, summary).toEqual([]);
        expect(report.orderViolations, summary).toEqual([]);
        expect(report.overlaps, summary).toEqual([]);
        expect(report.unfencedDeadLetters, summary).toEqual([]);
        expect(report.grantDuplicates, summary).toEqual([]);
        expect(report.writtenTwice, summary).toEqual([]);
        expect(report.unexplainedDuplicates, summary).toEqual([]);
      } finally {
        await harness.stop();
      }
    }, 600_000);
  });
}
