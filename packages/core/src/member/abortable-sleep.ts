/** Resolves after `ms`, or at once when `signal` aborts (then with false). */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A call that did not settle within its bound (`withTimeout`): no answer, not a refusal or an error. */
export class NoAnswerError extends Error {
  constructor(ms: number) {
    super(`no answer within ${ms} ms`);
    this.name = 'NoAnswerError';
  }
}

/**
 * `promise`, or a rejection "no answer within `ms` ms" (a NoAnswerError) when it has not settled by
 * then. A plain timer, cleared as soon as the promise settles: an AbortController per call (and the
 * DOMException its abort() makes, stack trace and all) was a measurable share of every ack call.
 */
export function withTimeout<R>(promise: Promise<R>, ms: number): Promise<R> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new NoAnswerError(ms)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Whether `promise` settles (either way) within `ms`. The timer is cleared as soon as it does, so a
 * stopped member leaves no timer behind to keep the process alive.
 */
export async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise.then(
        () => true,
        () => true,
      ),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** A one-shot signal that can be awaited and re-armed: the reader loop's "something changed". */
export class Wakeup {
  private waiters: (() => void)[] = [];
  private pending = false;

  notify(): void {
    this.pending = true;
    const waiters = this.waiters;
    this.waiters = [];
    for (const waiter of waiters) waiter();
  }

  /** Waits for the next notify (or one that came since the last wait), at most `ms`. */
  async wait(ms: number): Promise<void> {
    if (this.pending) {
      this.pending = false;
      return;
    }
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.waiters.push(done);
    });
    this.pending = false;
  }
}
