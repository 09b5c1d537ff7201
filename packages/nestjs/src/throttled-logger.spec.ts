import type { Logger } from '@nestjs/common';
import { describe, expect, it } from 'vitest';
import { MAX_THROTTLED_KEYS, ThrottledLogger } from './throttled-logger';

function aLogger() {
  const lines: string[] = [];
  return { lines, logger: { warn: (line: string) => lines.push(line) } as unknown as Logger };
}

describe('ThrottledLogger: one line per key and window, and a bounded number of keys', () => {
  it('a key repeated within its window is counted, and said with the next line', () => {
    let now = 0;
    const { lines, logger } = aLogger();
    const throttled = new ThrottledLogger(logger, 1000, () => now);
    throttled.warn('k', 'a');
    throttled.warn('k', 'a');
    now = 1000;
    throttled.warn('k', 'a');
    expect(lines).toEqual(['a', 'a (1 more like it since)']);
  });

  it('at MAX_THROTTLED_KEYS distinct keys within one window, a new key still logs and the oldest is forgotten', () => {
    const { lines, logger } = aLogger();
    const throttled = new ThrottledLogger(logger, 10_000, () => 0);
    for (let i = 0; i < MAX_THROTTLED_KEYS * 3; i++) throttled.warn(`member:error ${i}`, `error ${i}`);
    expect(throttled.size).toBe(MAX_THROTTLED_KEYS);
    expect(lines).toHaveLength(MAX_THROTTLED_KEYS * 3);
    throttled.warn(`member:error ${MAX_THROTTLED_KEYS * 3 - 1}`, 'again'); // the newest is still throttled
    expect(lines).toHaveLength(MAX_THROTTLED_KEYS * 3);
  });

  it('keys whose window has passed are forgotten first', () => {
    let now = 0;
    const { logger } = aLogger();
    const throttled = new ThrottledLogger(logger, 1000, () => now);
    for (let i = 0; i < MAX_THROTTLED_KEYS; i++) throttled.warn(`old ${i}`, 'x');
    now = 5000;
    throttled.warn('new', 'y');
    expect(throttled.size).toBe(1);
  });
});
