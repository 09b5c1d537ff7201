import { Logger } from '@nestjs/common';

/**
 * Most keys remembered (SPEC 10.3). Keys are often built from error messages, which can quote what
 * a message carried (an entry id, a handler's error text), so they come from outside: a stream of
 * distinct failures must not grow the map forever. Past this many, keys whose window has passed are
 * forgotten first (they would log at once anyway), then the oldest.
 */
export const MAX_THROTTLED_KEYS = 1000;

/**
 * Logs a warning at most once per `windowMs` per key, with how many were left out: a Redis that is
 * down must give a clear line now and then, not one per retry of every member.
 */
export class ThrottledLogger {
  private readonly last = new Map<string, { at: number; suppressed: number }>();

  constructor(
    private readonly logger: Logger,
    private readonly windowMs = 10_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** Keys remembered now (at most MAX_THROTTLED_KEYS). */
  get size(): number {
    return this.last.size;
  }

  warn(key: string, message: string): void {
    const now = this.now();
    const entry = this.last.get(key);
    if (entry && now - entry.at < this.windowMs) {
      entry.suppressed += 1;
      return;
    }
    const suffix = entry && entry.suppressed > 0 ? ` (${entry.suppressed} more like it since)` : '';
    if (!entry && this.last.size >= MAX_THROTTLED_KEYS) this.forget(now);
    this.last.set(key, { at: now, suppressed: 0 });
    this.logger.warn(`${message}${suffix}`);
  }

  private forget(now: number): void {
    for (const [key, entry] of this.last) {
      if (now - entry.at >= this.windowMs) this.last.delete(key);
    }
    // Every key is within its window: the oldest goes (a Map iterates in insertion order).
    if (this.last.size >= MAX_THROTTLED_KEYS) this.last.delete(this.last.keys().next().value as string);
  }
}
