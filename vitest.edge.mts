import { defineConfig } from 'vitest/config';
import base from './vitest.config.mts';

/**
 * The slow cases of the edge tier: `npm run test:edge` (docs/reliability.md, The edge tier).
 * (Not mergeConfig: it would append to the base's include list instead of replacing it.)
 */
// The base's projects (its npm test groups) would replace this include list: left out.
const { projects: _projects, ...baseTest } = base.test ?? {};

export default defineConfig({
  ...base,
  test: {
    ...baseTest,
    include: ['test/edge/edge-slow.edge.ts'],
    // One case at a time on one redis-server; each case has its own timeout.
    testTimeout: 600_000,
    hookTimeout: 60_000,
  },
});
