import { checkOption } from '@redis-stream-coordinator/core';

/** How often a wait on Redis state (readiness, drain) asks again: often enough for a test, light on Redis. */
export const POLL_INTERVAL_MS = 25;

/**
 * How long one look at Redis (a describeGroup) may take: bounded on its own, not by what is left of
 * the wait, so a look begun just before the deadline still says what it saw.
 */
export const LOOK_TIMEOUT_MS = 2_000;

/** How long a wait of the kit waits unless told otherwise: past a rebalance on a loaded CI machine. */
export const DEFAULT_TIMEOUT_MS = 10_000;

export function checkTimeout(timeoutMs: unknown, where: string): number {
  if (timeoutMs === undefined) return DEFAULT_TIMEOUT_MS;
  return checkOption('nestjs.testing.timeoutMs', timeoutMs, { label: `${where}: timeoutMs` });
}

/** `promise`, or a rejection naming `what` once `ms` passed: no call of the kit waits for good. */
export async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), Math.max(ms, 1));
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Asks `probe` until it returns a value (not undefined), at most every POLL_INTERVAL_MS and soon after
 * `wake` is called (on the next turn of the event loop, so that events emitted together, such as an
 * acknowledgement and its dead letter, are all seen first); after `timeoutMs`, rejects with
 * `describe()`'s account of what was seen.
 * A probe that throws rejects at once (a wrong name is not worth waiting out).
 */
export function waitUntil<T>(
  timeoutMs: number,
  probe: () => Promise<T | undefined> | T | undefined,
  describe: () => string,
  subscribe?: (wake: () => void) => () => void,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  return new Promise<T>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    let running = false;
    let again = false;
    let done = false;
    let woken: NodeJS.Immediate | undefined;
    const unsubscribe = subscribe?.(() => {
      woken ??= setImmediate(() => {
        woken = undefined;
        void tick();
      });
    });
    const finish = (settle: () => void) => {
      done = true;
      clearTimeout(timer);
      if (woken) clearImmediate(woken);
      unsubscribe?.();
      settle();
    };
    const tick = async (): Promise<void> => {
      if (done) return;
      if (running) {
        again = true;
        return;
      }
      running = true;
      clearTimeout(timer);
      try {
        const value = await probe();
        if (value !== undefined) return finish(() => resolve(value));
      } catch (error) {
        return finish(() => reject(error));
      } finally {
        running = false;
      }
      if (Date.now() >= deadline) return finish(() => reject(new Error(describe())));
      if (again) {
        again = false;
        return void tick();
      }
      timer = setTimeout(() => void tick(), Math.min(POLL_INTERVAL_MS, Math.max(deadline - Date.now(), 0)));
    };
    void tick();
  });
}
