import { describe, expect, it } from 'vitest';
import { FAULTS, selectedFaultKinds } from './reliability/faults';
import { ChaosHarness } from './reliability/harness';
import { formatReport } from './reliability/report';

/**
 * The short tier of the reliability harness (the long one: `npm run test:chaos`, docs/reliability.md).
 * Every selected fault kind once, in an order the seed decides. By default the kinds that wait for an
 * issue-11 fix (`needs` in faults.ts) are left out; run one alone with
 * `RSC_CHAOS_FAULTS=lost-read npx vitest run test/reliability.test.ts`, or all with RSC_CHAOS_FAULTS=all.
 */
const seed = Number(process.env.RSC_CHAOS_SEED ?? 20261129);
const kinds = selectedFaultKinds();
const waiting = Object.entries(FAULTS).filter(([kind, spec]) => spec.needs && !kinds.includes(kind as never));

describe('reliability harness (short tier)', () => {
  it(`fault kinds ${kinds.join(', ')} once each (seed ${seed}): nothing lost or stuck, order kept, no overlap, dead letters fenced, every duplicate explained`, async () => {
    if (waiting.length > 0) console.info(`left out until their fixes land: ${waiting.map(([kind, spec]) => `${kind} (${spec.needs})`).join('; ')}`);
    const harness = await ChaosHarness.start({ seed, progress: (line) => process.stderr.write(`  ${line}\n`) });
    try {
      const order = [...kinds].sort(() => harness.random() - 0.5);
      for (const kind of order) {
        await new Promise((resolve) => setTimeout(resolve, 200 + harness.random() * 300));
        await harness.inject(kind);
      }
      // Keep the load on a while after the last fault: an entry stranded by it must be seen stuck.
      await new Promise((resolve) => setTimeout(resolve, 4000));
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
