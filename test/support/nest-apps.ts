import type { LoggerService } from '@nestjs/common';
import { afterEach } from 'vitest';

/** Nest applications or testing modules a test made: push them here and they are closed after it, pass or fail. */
export function closedAfterEach<T extends { close(): Promise<unknown> }>(): T[] {
  const apps: T[] = [];
  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close().catch(() => undefined)));
  });
  return apps;
}

/** A Nest logger that prints nothing, for tests that check behaviour rather than log lines. */
export const quietLogger: LoggerService = { log() {}, error() {}, debug() {}, verbose() {}, warn() {} };
