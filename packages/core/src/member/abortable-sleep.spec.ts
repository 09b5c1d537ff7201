import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { NoAnswerError, settlesWithin, withTimeout } from './abortable-sleep';

describe('withTimeout', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('settles as the call does and leaves no timer behind', async () => {
    await expect(withTimeout(Promise.resolve('answer'), 1000)).resolves.toBe('answer');
    await expect(withTimeout(Promise.reject(new Error('refused')), 1000)).rejects.toThrow('refused');
    expect(vi.getTimerCount()).toBe(0);
  });

  it('makes no AbortController: every ack call is bounded, and aborting one made a DOMException each time', async () => {
    const made = vi.spyOn(globalThis, 'AbortController');
    try {
      await withTimeout(Promise.resolve('answer'), 1000);
      await settlesWithin(Promise.resolve(), 1000);
      expect(made).not.toHaveBeenCalled();
    } finally {
      made.mockRestore();
    }
  });

  it('rejects with a NoAnswerError once its bound passed without an answer', async () => {
    const late = withTimeout(new Promise<never>(() => undefined), 1000);
    const outcome = late.catch((error: unknown) => error);
    await vi.advanceTimersByTimeAsync(999);
    expect(vi.getTimerCount()).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(await outcome).toBeInstanceOf(NoAnswerError);
    expect(((await outcome) as Error).message).toBe('no answer within 1000 ms');
  });
});

describe('settlesWithin', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('is true for a call that settles either way in time, and leaves no timer behind', async () => {
    expect(await settlesWithin(Promise.reject(new Error('failed')), 1000)).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('is false once its bound passed', async () => {
    const settled = settlesWithin(new Promise<never>(() => undefined), 1000);
    await vi.advanceTimersByTimeAsync(1000);
    expect(await settled).toBe(false);
    expect(vi.getTimerCount()).toBe(0);
  });
});
