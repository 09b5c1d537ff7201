import { describe, it } from 'vitest';

/**
 * A tier of tests that needs something this machine may not have (a browser) or that runs only when
 * asked (a long variant): `skipReason` undefined runs `body` as a describe block; otherwise the tier
 * is one skipped test whose note says why, which `npm test` lists at its end (skipped-tiers-reporter.ts).
 */
export function describeTier(name: string, skipReason: string | undefined, body: () => void): void {
  if (skipReason === undefined) {
    describe(name, body);
    return;
  }
  describe(name, () => {
    it('(skipped tier)', (context) => context.skip(skipReason));
  });
}
