/**
 * When a member heartbeats: at most one heartbeat in flight, one more right after it when asked for
 * meanwhile, and a timer for the next regular one. Runs only while `enabled()` says so.
 */
export class HeartbeatSchedule {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;

  constructor(
    private readonly beat: () => Promise<void>,
    private readonly enabled: () => boolean,
  ) {}

  /** An out-of-cycle heartbeat as soon as possible: at once, or right after the one in flight. */
  now(): void {
    if (!this.enabled()) return;
    if (this.running) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    this.running = this.beat().finally(() => {
      this.running = undefined;
      if (this.again) {
        this.again = false;
        this.now();
      }
    });
  }

  /** The next heartbeat in about `intervalMs`: jittered, never later than asked, so members spread out. */
  after(intervalMs: number): void {
    if (!this.enabled()) return;
    clearTimeout(this.timer);
    const delay = Math.max(1, Math.round(intervalMs * (0.85 + 0.15 * Math.random())));
    this.timer = setTimeout(() => this.now(), delay);
  }

  /** No timer runs after this (a heartbeat in flight finishes; see `settled`). */
  cancel(): void {
    clearTimeout(this.timer);
  }

  /** Resolves when no heartbeat is in flight. */
  async settled(): Promise<void> {
    await this.running?.catch(() => undefined);
  }
}
