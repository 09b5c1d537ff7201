import { describe, expect, it } from 'vitest';
import { CallSignal } from './call-signal';
import { HandlerMessage } from './handler-message';

describe('HandlerMessage', () => {
  it("carries the entry's fields as its own, and the call's signal through a getter (made on first read)", () => {
    const call = new CallSignal();
    const message = new HandlerMessage('1-0', 'orders', 3, 'k1', { n: 1 }, { h: 'v' }, 2, call);
    expect({ ...message, ack: undefined, nack: undefined }).toEqual({
      id: '1-0',
      streamPrefix: 'orders',
      shardIndex: 3,
      key: 'k1',
      payload: { n: 1 },
      headers: { h: 'v' },
      deliveryCount: 2,
      ack: undefined,
      nack: undefined,
    });
    call.abort(new Error('revoked'));
    expect(message.signal.aborted).toBe(true);
    expect((message.signal.reason as Error).message).toBe('revoked');
    expect(message.signal).toBe(message.signal);
    // ackMode 'auto': ack() and nack() refuse, naming the entry.
    return expect(message.ack()).rejects.toThrow(/ackMode is 'auto'/);
  });
});
