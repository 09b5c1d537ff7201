import { describe, expect, it } from 'vitest';
import { ChaosHarness, FAULT_KINDS } from './reliability/harness';
import { formatReport } from './reliability/report';

/** The short tier of the reliability harness (the long one: `npm run test:chaos`, docs/reliability.md). */
const seed = Number(process.env.RSC_CHAOS_SEED ?? 20261129);

describe('reliability harness (short tier)', () => {
  it(`every fault kind twice on a seeded schedule (seed ${seed}): nothing lost, order kept, no overlap with an accepted ack, every duplicate explained`, async () => {
    const harness = await ChaosHarness.start({ seed });
    try {
      // Every kind twice, in an order and with pauses the seed decides.
      const kinds = [...FAULT_KINDS, ...FAULT_KINDS].sort(() => harness.random() - 0.5);
      for (const kind of kinds) {
        await new Promise((resolve) => setTimeout(resolve, 300 + harness.random() * 700));
        await harness.inject(kind);
      }
      const report = await harness.finish();
      const summary = `seed ${seed} (replay: RSC_CHAOS_SEED=${seed} npx vitest run test/reliability.test.ts)\n${formatReport(report)}`;
      console.info(summary);
      for (const kind of FAULT_KINDS) expect(report.faults.filter((f) => f.kind === kind).length, `${kind}\n${summary}`).toBeGreaterThanOrEqual(2);
      expect(report.produced, summary).toBeGreaterThan(1000);
      expect(report.lost, summary).toEqual([]);
      expect(report.orderViolations, summary).toEqual([]);
      expect(report.overlaps, summary).toEqual([]);
      expect(report.unexplainedDuplicates, summary).toEqual([]);
    } finally {
      await harness.stop();
    }
  }, 240_000);
});
