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

/**
 * The packaging tiers (the README's first hour from a clean copy, the packed declarations without the
 * optional peers) run `npm ci` and `npm pack`: minutes, not seconds. `.ci/run` runs them after
 * `npm test` with RSC_PACKAGING_TIERS=1; `npm test` alone lists them as skipped.
 */
export const PACKAGING_TIER_SKIP: string | undefined =
  process.env.RSC_PACKAGING_TIERS === '1'
    ? undefined
    : 'a packaging tier: .ci/run runs it (RSC_PACKAGING_TIERS=1 npx vitest run test/docs/readme-first-hour.test.ts test/packages/packed-types.test.ts)';
