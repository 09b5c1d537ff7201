import path from 'node:path';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: {
    alias: {
      '@redis-stream-coordinator/core/testing': path.resolve(import.meta.dirname, 'packages/core/src/testing/index.ts'),
      '@redis-stream-coordinator/core': path.resolve(import.meta.dirname, 'packages/core/src/index.ts'),
      '@redis-stream-coordinator/dashboard/nest': path.resolve(import.meta.dirname, 'packages/dashboard/src/nest/index.ts'),
      '@redis-stream-coordinator/dashboard': path.resolve(import.meta.dirname, 'packages/dashboard/src/index.ts'),
      '@redis-stream-coordinator/nestjs/microservices': path.resolve(import.meta.dirname, 'packages/nestjs/src/microservices/index.ts'),
      '@redis-stream-coordinator/nestjs': path.resolve(import.meta.dirname, 'packages/nestjs/src/index.ts'),
    },
  },
  test: {
    include: ['packages/*/src/**/*.spec.ts', 'test/**/*.test.ts'],
    // Each test file starts its own redis-server processes, so files run in parallel safely.
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
