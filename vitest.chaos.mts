import { defineConfig, mergeConfig } from 'vitest/config';
import base from './vitest.config.mts';

/** The long tier of the reliability harness: `npm run test:chaos -- --duration 10m --seed N`. */
export default mergeConfig(
  base,
  defineConfig({
    test: {
      include: ['test/reliability/soak.chaos.ts'],
      testTimeout: 24 * 3_600_000,
      hookTimeout: 60_000,
    },
  }),
);
