import { Logger } from '@nestjs/common';

/**
 * Logs a warning at most once per `windowMs` per key, with how many were left out: a Redis that is
 * down must give a clear line now and then, not one per retry of every member.
 */
export class ThrottledLogger {
  private readonly last = new Map<string, { at: number; suppressed: number }>();

  constructor(
    private readonly logger: Logger,
    private readonly windowMs = 10_000,
  ) {}

  warn(key: string, message: string): void {
    const now = Date.now();
    const entry = this.last.get(key);
    if (entry && now - entry.at < this.windowMs) {
      entry.suppressed += 1;
      return;
    }
    const suffix = entry && entry.suppressed > 0 ? ` (${entry.suppressed} more like it since)` : '';
    this.last.set(key, { at: now, suppressed: 0 });
    this.logger.warn(`${message}${suffix}`);
  }
}
