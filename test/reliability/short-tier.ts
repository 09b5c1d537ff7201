import { describe, expect, it } from 'vitest';
import type { FaultKind } from './checker';
import { ChaosHarness } from './harness';
import { formatReport } from './report';

/**
 * One short-tier run of the reliability harness: each of `kinds` once, in an order the seed decides,
 * then every promise of the checker. test/reliability.test.ts and test/reliability-fixes.test.ts
 * split the fault kinds between them so that `npm test` runs them in parallel.
 */
export function shortTier(title: string, kinds: FaultKind[], replay: string): void {
  const seed = Number(process.env.RSC_CHAOS_SEED ?? 20261129);
  describe(`reliability harness (short tier): ${title}`, () => {
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
        const summary = `seed ${seed} (replay: RSC_CHAOS_SEED=${seed} RSC_CHAOS_FAULTS=${order.join(',')} ${replay})\n${formatReport(report)}`;
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
