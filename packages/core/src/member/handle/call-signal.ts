/**
 * A handler call's abort signal (`message.signal`), made only when someone reads it. Most handlers
 * never look at their signal, and an AbortController per entry was a measurable share of the
 * member's CPU (its construction and the garbage it leaves; `npm run bench:profile`). An abort
 * before the signal is read is kept: the signal, when read, is already aborted with that reason.
 */
export class CallSignal {
  private controller: AbortController | undefined;
  private abortedWith: { reason: unknown } | undefined;

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.abortedWith) this.controller.abort(this.abortedWith.reason);
    }
    return this.controller.signal;
  }

  get aborted(): boolean {
    return this.abortedWith !== undefined;
  }

  /** Aborts the call (the first reason wins, as with AbortController). */
  abort(reason: unknown): void {
    if (this.abortedWith) return;
    this.abortedWith = { reason };
    this.controller?.abort(reason);
  }
}
