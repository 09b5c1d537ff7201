import path from 'node:path';
import { defineConfig } from 'vitest/config';
import SlowFirstSequencer from './test/support/slow-first-sequencer.mts';

/**
 * Test files that run in workers they share (the 'tests-shared' project, isolate: false): a fresh
 * process per file cost about 0.7 s of CPU (forking, and importing the packages' sources again): 52
 * of these files took 71.8 s of CPU in a process each, 35.9 s sharing three workers. Each uses only
 * the fixtures that stop what they start (redis-server and clients after the file, members after each
 * test), sets no environment variable, mocks nothing and starts no process or Nest application;
 * test/support/shared-worker-guard.ts fails a file that leaves a socket, timer, server, child process
 * or environment variable behind for the next. The files it caught stay in 'tests' (a timer left
 * more than 3 s after the file: member-lifecycle, member-runtime, resharding and option-ranges in one
 * run of four, member-runtime-control in one run of five).
 */
const SHARED_WORKER_FILES = [
  'test/attacks/attack-member.test.ts',
  'test/attacks/attack-producer.test.ts',
  'test/attacks/attack-resize.test.ts',
  'test/consumption/codecs-consumption.test.ts',
  'test/consumption/codecs.test.ts',
  'test/consumption/member-batches.test.ts',
  'test/consumption/member-dead-letter-options.test.ts',
  'test/consumption/member-manual-ack.test.ts',
  'test/consumption/member-shard-trouble.test.ts',
  'test/coordinator/coordinator-assignment.test.ts',
  'test/coordinator/coordinator-expiry.test.ts',
  'test/coordinator/coordinator-fencing.test.ts',
  'test/coordinator/coordinator-join-proof.test.ts',
  'test/coordinator/coordinator-lifecycle.test.ts',
  'test/coordinator/coordinator-states.test.ts',
  'test/coordinator/coordinator-steady.test.ts',
  'test/coordinator/coordinator-wake-targets.test.ts',
  'test/coordinator/shard-count-extremes.test.ts',
  'test/coordinator/static-membership.test.ts',
  'test/delayed/deferred-order.test.ts',
  'test/delayed/deferred-retries.test.ts',
  'test/delayed/delayed-delivery.test.ts',
  'test/delayed/delayed-resize.test.ts',
  'test/delayed/delayed-resize-givers-attack.test.ts',
  'test/delayed/delayed-resize-givers-cache.test.ts',
  'test/docs/doc-examples.test.ts',
  'test/docs/doc-test-map.test.ts',
  'test/docs/spec-citations.test.ts',
  'test/member/member-bad-days.test.ts',
  'test/member/member-commit-refused.test.ts',
  'test/member/member-events.test.ts',
  'test/member/member-late-answers.test.ts',
  'test/member/member-stuck-connection.test.ts',
  'test/member/member-wake-ups.test.ts',
  'test/member/redis-loading-retry.test.ts',
  'test/member/static-member-runtime.test.ts',
  'test/member/wake-hub.test.ts',
  'test/operations/admin-dead-letters.test.ts',
  'test/operations/admin-reset-offsets.test.ts',
  'test/operations/admin-retention.test.ts',
  'test/operations/admin-schedules.test.ts',
  'test/operations/stream-not-found.test.ts',
  'test/operations/telemetry-no-provider.test.ts',
  'test/operations/telemetry.test.ts',
  'test/packages/dependency-ranges.test.ts',
  'test/producer/merged-sends.test.ts',
  'test/producer/producer-routing.test.ts',
  'test/reliability/reliability-checker.test.ts',
  'test/reliability/tcp-proxy.test.ts',
  'test/reliability/transport-outcomes.test.ts',
  'test/resharding/cutover-slow-link.test.ts',
  'test/resharding/delete-drained-shards.test.ts',
  'test/resharding/resharding-history.test.ts',
];

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
          exclude: ['test/reliability/reliability.test.ts', ...SHARED_WORKER_FILES],
          // Five files at a time on 2 cores: a file of test/member or test/attacks keeps a core busy
          // about a fifth of its time (57 s of CPU for 18 files that run 295 s), so the files past
          // the second wait on their own timers rather than for a core. At 126 files, three at a
          // time took 317 s (the cores 63 % busy), four 257 s (76 %); at 129 files four took npm test
          // to 5 min 9 s (vitest 295 s), five to 4 min 36 s (vitest 264 s); two took 5.5 minutes at 91.
          maxWorkers: 5,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'tests-shared',
          include: SHARED_WORKER_FILES,
          isolate: false,
          setupFiles: ['test/support/shared-worker-guard.ts'],
          maxWorkers: 5,
          sequence: { groupOrder: 0 },
        },
      },
      {
        // The packages' pure specs (no redis-server, no timer left running, fake timers and spies
        // restored after each test) in workers that each run several files: a fresh process per
        // file cost about 0.5 s of CPU each, half of what their 22 files took (20.6 s of CPU
        // against 10.0 s). Named after 'tests' so that they fill the end of that project's run, in its five workers.
        extends: true,
        test: { name: 'unit-specs', include: ['packages/*/src/**/*.spec.ts'], isolate: false, maxWorkers: 5, sequence: { groupOrder: 0 } },
      },
      {
        // The short chaos tier (two harnesses side by side, about 85 s) in one of the five workers from
        // the start, while the others run the rest (test/support/slow-first-sequencer.mts): it keeps
        // about two thirds of a core busy (51 s of CPU in 76 s alone), so alone and last it left a
        // core idle for its whole run.
        extends: true,
        test: { name: 'chaos-short-tier', include: ['test/reliability/reliability.test.ts'], maxWorkers: 5, sequence: { groupOrder: 0 } },
      },
    ],
  },
});
