import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { CallDeadlines } from './call-deadlines';

/** Timers that keep the process alive now. */
const referencedTimers = () => process.getActiveResourcesInfo().filter((resource) => resource === 'Timeout').length;

describe('CallDeadlines', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('expires each unanswered call at its own bound, in the order they were started', () => {
    const deadlines = new CallDeadlines(100);
    const expired: string[] = [];
    deadlines.start(() => expired.push('a'));
    vi.advanceTimersByTime(40);
    const b = deadlines.start(() => expired.push('b'));
    vi.advanceTimersByTime(30);
    deadlines.start(() => expired.push('c'));
    deadlines.end(b);
    vi.advanceTimersByTime(29);
    expect(expired).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(expired).toEqual(['a']);
    // b was answered: only c is left, 100 ms after it started.
    vi.advanceTimersByTime(69);
    expect(expired).toEqual(['a']);
    vi.advanceTimersByTime(1);
    expect(expired).toEqual(['a', 'c']);
  });

  it('a call started by an expiry gets its own full bound', () => {
    const deadlines = new CallDeadlines(50);
    const expired: string[] = [];
    deadlines.start(() => {
      expired.push('first');
      deadlines.start(() => expired.push('second'));
    });
    vi.advanceTimersByTime(50);
    expect(expired).toEqual(['first']);
    vi.advanceTimersByTime(49);
    expect(expired).toEqual(['first']);
    vi.advanceTimersByTime(1);
    expect(expired).toEqual(['first', 'second']);
  });

  it('sets one timer for calls answered one after another, and holds the process only while one is unanswered', () => {
    vi.useRealTimers();
    const timers = vi.spyOn(globalThis, 'setTimeout');
    const deadlines = new CallDeadlines(60_000);
    const before = referencedTimers();
    for (let i = 0; i < 100; i++) {
      const deadline = deadlines.start(() => {
        throw new Error('answered in time, it must not expire');
      });
      expect(referencedTimers()).toBe(before + 1);
      deadlines.end(deadline);
      expect(referencedTimers()).toBe(before);
    }
    expect(timers).toHaveBeenCalledTimes(1);
    timers.mockRestore();
    // The spec leaves no timer running.
    clearTimeout(timers.mock.results[0]?.value as NodeJS.Timeout);
  });
});
