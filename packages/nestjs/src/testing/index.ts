/**
 * Test support for applications built on `@redis-stream-coordinator/nestjs`, for any test runner:
 * `@redis-stream-coordinator/nestjs/testing` (docs/testing.md).
 */
export { TestRedis, REDIS_URL_VARIABLE } from './test-redis';
export {
  CoordinatorTesting,
  type DeadLetteredEntry,
  type EntryMatch,
  type EntryRef,
  type GroupRef,
  type HandledEntry,
  type WaitOptions,
} from './coordinator-testing';
export type { Attempt, EntryRecord, SeenMessage } from './entry-log';
export { type InjectedFailure, InjectedFailureError } from './injected-failures';
export { DEFAULT_TIMEOUT_MS } from './deadline';
