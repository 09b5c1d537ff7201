/** One call's bound: `expire` runs once it passes, unless the call was answered first (`CallDeadlines.end`). */
export interface CallDeadline {
  /** When it passes (`performance.now()`, a monotonic clock: a wall clock stepped back would not delay it). */
  readonly at: number;
  readonly expire: () => void;
}

/**
 * The bounds of a producer's calls in flight (SPEC 10.1), on one timer. Every call gets the same
 * bound, so the bounds pass in the order the calls were sent: the timer is set for the oldest call
 * still unanswered, and a call answered in time costs no timer of its own. A timer set and cleared
 * per call made a send at one in flight pay Node's timer list for it on every call (an empty list
 * made and dropped each time), more than the rest of the producer's own work for that send. The
 * timer keeps the process alive only while some call is unanswered, as a timer per call did.
 */
export class CallDeadlines {
  /** Unanswered calls' bounds, oldest first (insertion order, and all bounds are of one length). */
  private readonly pending = new Set<CallDeadline>();
  private timer: NodeJS.Timeout | undefined;
  /** Whether the timer keeps the process alive (only while `pending` has a call). */
  private referenced = false;

  constructor(private readonly boundMs: number) {}

  /** Starts a call's bound now. */
  start(expire: () => void): CallDeadline {
    const deadline: CallDeadline = { at: performance.now() + this.boundMs, expire };
    this.pending.add(deadline);
    if (this.timer === undefined) this.arm(deadline.at);
    else if (!this.referenced) {
      this.timer.ref();
      this.referenced = true;
    }
    return deadline;
  }

  /** The call was answered before its bound passed: it no longer expires. */
  end(deadline: CallDeadline): void {
    this.pending.delete(deadline);
    if (this.pending.size === 0 && this.timer !== undefined && this.referenced) {
      this.timer.unref();
      this.referenced = false;
    }
  }

  private arm(at: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.fire(), Math.max(1, Math.ceil(at - performance.now())));
    this.referenced = true;
  }

  /** Expires every call whose bound passed, then waits for the oldest one left. */
  private fire(): void {
    this.timer = undefined;
    this.referenced = false;
    for (const deadline of this.pending) {
      if (deadline.at > performance.now()) {
        // The oldest call left (arm replaces a timer that a call started by an expiry above set).
        this.arm(deadline.at);
        return;
      }
      this.pending.delete(deadline);
      deadline.expire();
    }
  }
}
