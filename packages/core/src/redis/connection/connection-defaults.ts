/**
 * How often a connection made while Redis loads its data (a restart with AOF or RDB) asks again
 * whether loading is done. ioredis's ready check otherwise waits Redis's `loading_eta_seconds`, at
 * least 1 s and up to `maxLoadingRetryTime` (default 10 s), before it asks again, and holds every
 * command until then: a member whose connection came back during a short load sat idle for up to
 * 10 s after Redis was ready (the reliability soak's Redis-restart p99, docs/reliability.md). The
 * connections this library opens (a member's reader, the wake-up subscriber, the NestJS module's
 * clients) ask every 200 ms; pass `maxLoadingRetryTime: LOADING_RETRY_MS` on clients you create.
 */
export const LOADING_RETRY_MS = 200;

/** `maxLoadingRetryTime` for a connection the library opens from `options`: the caller's if shorter. */
export function loadingRetryTime(configured: number | undefined): number {
  return configured !== undefined && configured > 0 ? Math.min(configured, LOADING_RETRY_MS) : LOADING_RETRY_MS;
}
