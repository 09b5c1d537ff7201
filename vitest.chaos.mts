import { defineConfig } from 'vitest/config';
import base from './vitest.config.mts';

/**
 * The long tier of the reliability harness: `npm run test:chaos -- --duration 10m --seed N`.
 * (Not mergeConfig: it would append to the base's include list instead of replacing it.)
 */
// The base's projects (its npm test groups) would replace this include list: left out.
const { projects: _projects, ...baseTest } = base.test ?? {};

export default defineConfig({
  ...base,
  test: {
    ...baseTest,
    include: ['test/reliability/soak.chaos.ts'],
    testTimeout: 24 * 3_600_000,
    hookTimeout: 60_000,
  },
});
