import type { Reporter, TestModule } from 'vitest/node';

/**
 * Ends a test run with the tiers it skipped and why, after vitest's own summary, so that a run that
 * passed without its browser tests or its long variants says so where one looks last. A tier is a
 * skipped test with a note (`describeTier` in tier.ts, or any `context.skip(note)`); tests skipped
 * without a note (`.skip`, `-t` filters) are not tiers and are not listed.
 */
export default class SkippedTiersReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const skipped: string[] = [];
    for (const testModule of testModules) {
      for (const test of testModule.children.allTests()) {
        const result = test.result();
        if (result.state !== 'skipped' || !result.note) continue;
        const tier = test.parent.type === 'suite' ? test.parent.fullName : test.fullName;
        skipped.push(`  - ${tier} (${testModule.relativeModuleId}): ${result.note}`);
      }
    }
    if (skipped.length === 0) return;
    process.stdout.write(`\nSkipped tiers (${skipped.length}):\n${skipped.join('\n')}\n\n`);
  }
}
