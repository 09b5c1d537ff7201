import { describe, expect, it } from 'vitest';
import { CallSignal } from './call-signal';

describe('CallSignal', () => {
  it('makes no controller until the signal is read, and aborts it then with the reason given before', () => {
    const call = new CallSignal();
    const reason = new Error('shard-lost');
    call.abort(reason);
    call.abort(new Error('later'));
    expect(call.aborted).toBe(true);
    expect(call.signal.aborted).toBe(true);
    expect(call.signal.reason).toBe(reason);
  });

  it('fires listeners of a signal read before the abort, once, with the first reason', () => {
    const call = new CallSignal();
    const seen: unknown[] = [];
    call.signal.addEventListener('abort', () => seen.push(call.signal.reason));
    expect(call.signal.aborted).toBe(false);
    call.abort('timeout');
    call.abort('released');
    expect(seen).toEqual(['timeout']);
  });
});
