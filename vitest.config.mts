import path from 'node:path';
import { defineConfig } from 'vitest/config';
import SlowFirstSequencer from './test/support/slow-first-sequencer.mts';

export default defineConfig({
  resolve: {
    alias: {
      '@redis-stream-coordinator/core/testing': path.resolve(import.meta.dirname, 'packages/core/src/testing/index.ts'),
      '@redis-stream-coordinator/core': path.resolve(import.meta.dirname, 'packages/core/src/index.ts'),
      '@redis-stream-coordinator/dashboard/nest': path.resolve(import.meta.dirname, 'packages/dashboard/src/nest/index.ts'),
      '@redis-stream-coordinator/dashboard': path.resolve(import.meta.dirname, 'packages/dashboard/src/index.ts'),
      '@redis-stream-coordinator/nestjs/testing': path.resolve(import.meta.dirname, 'packages/nestjs/src/testing/index.ts'),
      '@redis-stream-coordinator/nestjs/microservices': path.resolve(import.meta.dirname, 'packages/nestjs/src/microservices/index.ts'),
      '@redis-stream-coordinator/nestjs': path.resolve(import.meta.dirname, 'packages/nestjs/src/index.ts'),
    },
  },
  test: {
    // Each test file starts its own redis-server processes, so files run in parallel safely.
    pool: 'forks',
    // Two files at a time on this 2-core machine (the tests project runs three: below): most of a
    // file's time is waiting (sessions, sweeps, timeouts), and one at a time took npm test past 5
    // minutes (325 s at 61 files).
    maxWorkers: 2,
    // The slow files first, in CI's clean clone too (test/support/slow-first-sequencer.mts).
    sequence: { sequencer: SlowFirstSequencer },
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // After vitest's summary: the tiers this run skipped (no chromium, a long variant not asked for) and why.
    reporters: ['default', './test/support/skipped-tiers-reporter.ts'],
    projects: [
      {
        extends: true,
        test: {
          name: 'tests',
          include: ['test/**/*.test.ts'],
          exclude: ['test/reliability/reliability.test.ts'],
          // Three files at a time on 2 cores: a file of test/member or test/attacks keeps a core busy
          // about a fifth of its time (57 s of CPU for 18 files that run 295 s), so the third file
          // waits on its own timers rather than for a core. Two at a time took npm test to 5.5
          // minutes at 91 files.
          maxWorkers: 3,
          sequence: { groupOrder: 0 },
        },
      },
      {
        // The packages' pure specs (no redis-server, no timer left running, fake timers and spies
        // restored after each test) in workers that each run several files: a fresh process per
        // file cost about 0.5 s of CPU each, half of what their 22 files took (20.6 s of CPU
        // against 10.0 s). Named after 'tests' so that they fill the end of that project's run, in its three workers.
        extends: true,
        test: { name: 'unit-specs', include: ['packages/*/src/**/*.spec.ts'], isolate: false, maxWorkers: 3, sequence: { groupOrder: 0 } },
      },
      {
        // The short chaos tier runs two harnesses side by side and wants both cores: alone, last.
        extends: true,
        test: { name: 'chaos-short-tier', include: ['test/reliability/reliability.test.ts'], sequence: { groupOrder: 1 } },
      },
    ],
  },
});
