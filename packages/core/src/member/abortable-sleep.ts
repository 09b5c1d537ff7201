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

/** `promise`, or a rejection "no answer within `ms` ms" when it has not settled by then. */
export function withTimeout<R>(promise: Promise<R>, ms: number): Promise<R> {
  return Promise.race([
    promise,
    sleep(ms).then(() => {
      throw new Error(`no answer within ${ms} ms`);
    }),
  ]);
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
